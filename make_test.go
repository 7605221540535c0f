package wharf_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
)

// A DATABASE_URL that does not answer fails make's commands at once, saying
// what was tried, without its password and without falling back to another
// server.
func TestEnsurePostgresRefusesAnUnreachableDatabaseURL(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "scripts/ensure-postgres.sh")
	// Port 1 on loopback: nothing listens there.
	cmd.Env = append(os.Environ(), "DATABASE_URL=postgres://alice:hunter2-secret@127.0.0.1:1/app?sslmode=disable")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "stderr: %s", stderr.String())
	require.Equal(t, 1, exit.ExitCode())
	require.Empty(t, stdout.String(), "no URL printed: nothing else is used")
	require.Contains(t, stderr.String(), "DATABASE_URL is set but does not answer: postgres://alice:xxxxx@127.0.0.1:1/app")
	require.Contains(t, stderr.String(), "tried:")
	require.Contains(t, stderr.String(), "unset it")
	require.NotContains(t, stderr.String(), "hunter2")
}

// make example stopped with Ctrl-C on a terminal shuts the app down cleanly
// and exits 0. The test runs make under script(1), which gives it a
// pseudo-terminal, and types Ctrl-C into it as a user would.
func TestMakeExampleCtrlCExitsZero(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"make", "script"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: apt-get install make bsdutils", tool)
		}
	}
	url := testdb.NewURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "script", "-qec", "make --no-print-directory example", "/dev/null")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url, "WHARF_EXAMPLE_ADDR=127.0.0.1:0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }()

	var log strings.Builder
	listening := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		once := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if !once && strings.Contains(sc.Text(), "example: listening") {
				once = true
				close(listening)
			}
		}
	}()
	select {
	case <-listening:
	case <-done:
		t.Fatalf("make example ended before listening:\n%s", log.String())
	case <-ctx.Done():
		t.Fatal("make example did not start listening in time")
	}
	_, err = stdin.Write([]byte{0x03}) // Ctrl-C
	require.NoError(t, err)
	<-done
	err = cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("make example exited %d after Ctrl-C:\n%s", exit.ExitCode(), log.String())
	}
	require.NoError(t, err)
	require.Contains(t, log.String(), "example: shutting down")
}
