// Package testproc runs a helper test of the test binary in a process of
// its own: how a test puts two worker nodes in two processes, or kills one
// mid-work, with nothing but `go test`.
//
// The parent test calls Start with the name of a helper test. The helper
// test is a Test function that skips unless Child says it is the child;
// in the child it sets up, calls Ready (Start returns then), works until
// AwaitStop returns (the parent called Stop, or is gone: the child's stdin
// closed), may Report values back, and returns. A helper test that fails
// makes its process exit with a non-zero status, which Stop returns.
//
// The process is always stopped (killed when it does not stop in time)
// and waited for when the parent test ends, and its output (stdout and
// stderr, the child's t.Log lines among them) is logged when the parent
// test failed.
package testproc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// childEnv names, in a child process, the helper test it runs.
const childEnv = "WHARF_TESTPROC_CHILD"

// Lines a child writes to its stdout for the parent.
const (
	readyLine    = "testproc:ready"
	reportPrefix = "testproc:report "
)

// How long a child may take.
const (
	// ReadyTimeout bounds how long Start waits for the child's Ready: a
	// race-instrumented binary starting on a loaded machine is slow, but
	// not this slow.
	ReadyTimeout = time.Minute
	// StopTimeout bounds how long Stop waits for the child to exit before
	// killing it.
	StopTimeout = 30 * time.Second
)

// Process is a helper test running in a child process.
type Process struct {
	test   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *output
	exited chan struct{} // closed once the process has exited and err is set
	err    error         // the process's exit: nil for status 0

	mu      sync.Mutex
	stopped bool // Stop or Kill was called
}

// Start runs the helper test named test (its Test function's name) of this
// test binary in a child process, with env ("NAME=value") added to this
// process's environment, and returns once the child has called Ready. A
// child that exits or does not become ready within ReadyTimeout fails tb.
// When tb ends the process is stopped if it was not already, and a helper
// test that failed then fails tb (after Stop or Kill, the caller has the
// error).
func Start(tb testing.TB, test string, env ...string) *Process {
	tb.Helper()
	p := &Process{test: test, out: newOutput(), exited: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(test)+"$", "-test.count=1", "-test.v")
	p.cmd.Env = append(append(os.Environ(), childEnv+"="+test), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	// Nothing but the child should hold its pipes; should a grandchild,
	// Wait returns this long after the child exits all the same.
	p.cmd.WaitDelay = 5 * time.Second
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		tb.Fatalf("testproc: %s: stdin: %v", test, err)
	}
	p.stdin = stdin
	if err := p.cmd.Start(); err != nil {
		tb.Fatalf("testproc: start %s: %v", test, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	tb.Cleanup(func() { p.cleanup(tb) })

	timer := time.NewTimer(ReadyTimeout)
	defer timer.Stop()
	select {
	case <-p.out.ready:
		return p
	case <-p.exited:
		tb.Fatalf("testproc: %s exited before it was ready (%v)", test, p.err)
	case <-timer.C:
		tb.Fatalf("testproc: %s not ready after %s", test, ReadyTimeout)
	}
	return nil
}

// cleanup stops the process when the test ends and reports how it ended.
func (p *Process) cleanup(tb testing.TB) {
	tb.Helper()
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if err := p.Stop(); err != nil && !stopped {
		tb.Errorf("testproc: %s: %v", p.test, err)
	}
	if tb.Failed() {
		tb.Logf("testproc: output of %s (pid %d):\n%s", p.test, p.cmd.Process.Pid, p.Output())
	}
}

// Stop asks the child to stop (closes its stdin: AwaitStop returns) and
// waits until it has exited, killing it after StopTimeout. It returns nil
// when the helper test passed, else how the process ended (exit status 1
// when the test failed; the reason is in Output). Calling it again returns
// the same.
func (p *Process) Stop() error {
	p.mu.Lock()
	if !p.stopped {
		p.stopped = true
		_ = p.stdin.Close()
	}
	p.mu.Unlock()
	timer := time.NewTimer(StopTimeout)
	defer timer.Stop()
	select {
	case <-p.exited:
		return p.err
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("did not stop within %s, killed: %w", StopTimeout, p.err)
	}
}

// Kill kills the child with SIGKILL (no deferred function, no cleanup
// runs in it) and waits until it has exited.
func (p *Process) Kill() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	_ = p.cmd.Process.Kill()
	<-p.exited
	_ = p.stdin.Close()
}

// Output returns what the child has written to its stdout and stderr.
func (p *Process) Output() string { return p.out.String() }

// Reported returns the value the child last reported for key, and whether
// it reported one.
func (p *Process) Reported(key string) (string, bool) {
	value, found := "", false
	lines := bufio.NewScanner(strings.NewReader(p.Output()))
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		_, rest, ok := strings.Cut(lines.Text(), reportPrefix)
		if !ok {
			continue
		}
		if k, v, ok := strings.Cut(rest, " "); ok && k == key {
			value, found = v, true
		}
	}
	return value, found
}

// Child reports whether this process is the child process running the
// helper test t.
func Child(t *testing.T) bool { return os.Getenv(childEnv) == t.Name() }

// Ready tells the parent that the child is ready: Start returns.
func Ready() { fmt.Fprintln(os.Stdout, readyLine) }

// AwaitStop blocks until the parent calls Stop or is gone.
func AwaitStop() { _, _ = io.Copy(io.Discard, os.Stdin) }

// Report sends the parent value (one line, JSON say) for key (no spaces),
// read with Process.Reported.
func Report(key, value string) error {
	if key == "" || strings.ContainsAny(key, " \n") || strings.Contains(value, "\n") {
		return errors.New("testproc: a report is a key without spaces and a one-line value")
	}
	// One write: a line that stderr's writes cannot split.
	_, err := fmt.Fprintf(os.Stdout, "%s%s %s\n", reportPrefix, key, value)
	return err
}

// output collects a child's stdout and stderr, and closes ready once the
// child's ready line has arrived.
type output struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	ready   chan struct{}
	isReady bool
}

func newOutput() *output { return &output{ready: make(chan struct{})} }

func (o *output) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	from := max(o.buf.Len()-len(readyLine), 0) // the line may span writes
	n, err := o.buf.Write(b)
	if !o.isReady && bytes.Contains(o.buf.Bytes()[from:], []byte(readyLine+"\n")) {
		o.isReady = true
		close(o.ready)
	}
	return n, err
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
