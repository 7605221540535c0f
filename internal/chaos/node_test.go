package chaos

import (
	"go.uber.org/goleak"

	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// buildDir holds the example binary, built once per test binary and
// removed by TestMain.
var buildDir string

var exampleBuild struct {
	once sync.Once
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	if code == 0 {
		// Every package's tests end with a goroutine-leak check.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// exampleBinary builds the example app once and returns its path.
func exampleBinary(t testing.TB) string {
	t.Helper()
	exampleBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "wharf-chaos-")
		if err != nil {
			exampleBuild.err = err
			return
		}
		buildDir = dir
		goBin, err := exec.LookPath("go")
		if err != nil {
			exampleBuild.err = fmt.Errorf("the chaos suite builds the example with the go command: %w", err)
			return
		}
		path := filepath.Join(dir, "example")
		out, err := exec.Command(goBin, "build", "-o", path, "github.com/wharfhq/wharf/example").CombinedOutput()
		if err != nil {
			exampleBuild.err = fmt.Errorf("go build example: %w\n%s", err, out)
			return
		}
		exampleBuild.path = path
	})
	require.NoError(t, exampleBuild.err)
	return exampleBuild.path
}

// node is one example process. Its address survives restarts, so senders
// keep one URL per node.
type node struct {
	name string
	addr string
	env  []string // beyond the test's own environment
	log  string   // stderr of every run, appended

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when the current run has exited
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func newNode(t testing.TB, name, databaseURL string, env ...string) *node {
	n := &node{
		name: name,
		addr: freeAddr(t),
		log:  filepath.Join(t.TempDir(), name+".log"),
	}
	n.env = append([]string{"DATABASE_URL=" + databaseURL, "WHARF_EXAMPLE_ADDR=" + n.addr}, env...)
	t.Cleanup(func() {
		n.stop(t)
		if t.Failed() {
			t.Logf("%s: last lines of its log:\n%s", n.name, tail(n.log, 40))
		}
	})
	return n
}

func (n *node) url() string { return "http://" + n.addr }

// start runs the example and waits until it answers. A run that exits
// while starting is retried a few times: the server is shared with other
// tests and may be out of connections for a moment.
func (n *node) start(t testing.TB) {
	t.Helper()
	for try := 1; ; try++ {
		err := n.startOnce(t)
		if err == nil {
			return
		}
		if try == 4 {
			t.Fatalf("%s: %v; last lines of its log:\n%s", n.name, err, tail(n.log, 40))
		}
		t.Logf("%s: %v; starting it again", n.name, err)
		time.Sleep(time.Duration(try) * time.Second) // backing off from a busy server
	}
}

func (n *node) startOnce(t testing.TB) error {
	logFile, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer logFile.Close()
	cmd := exec.Command(exampleBinary(t))
	cmd.Env = append(os.Environ(), n.env...) // later entries win
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A test binary killed before its cleanups must not leave nodes behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()

	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := client.Get(n.url() + "/balances/acct_ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("exited while starting (%s)", cmd.ProcessState)
		case <-time.After(50 * time.Millisecond): // polling the node's port
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("did not answer within 90s")
		}
	}
}

// pid returns the current run's process id, 0 when it is not running.
func (n *node) pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	select {
	case <-n.exited:
		return 0
	default:
		return n.cmd.Process.Pid
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (n *node) kill(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	require.NotNil(t, cmd, "%s was never started", n.name)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	<-exited
}

// stop shuts the node down gracefully (SIGTERM: in-flight jobs finish),
// killing it after 60s.
func (n *node) stop(t testing.TB) {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Errorf("%s did not stop within 60s of SIGTERM; killed", n.name)
		_ = cmd.Process.Kill()
		<-exited
	}
}

// procStatus reads fields of /proc/<pid>/status ("VmRSS" in kB,
// "Threads") and the number of open files; ok is false once the process
// is gone.
type procSample struct {
	rssKB, threads, fds int
}

func sampleProc(pid int) (procSample, bool) {
	var s procSample
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(value)
		if len(fields) == 0 {
			continue
		}
		v, _ := strconv.Atoi(fields[0])
		switch name {
		case "VmRSS":
			s.rssKB = v
		case "Threads":
			s.threads = v
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, false
	}
	s.fds = len(fds)
	return s, true
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
