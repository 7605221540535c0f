package testproc_test

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/wharfhq/wharf/internal/testproc"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Environment of TestChild: what it does.
const modeEnv = "TESTPROC_TEST_MODE"

// TestChild is the helper test the other tests run: it reports, becomes
// ready, waits to be stopped, then reports again, or fails when asked to.
func TestChild(t *testing.T) {
	if !testproc.Child(t) {
		t.Skip("the child process of this package's tests")
	}
	require.NoError(t, testproc.Report("greeting", `{"hello":"early"}`))
	testproc.Ready()
	testproc.AwaitStop()
	require.NoError(t, testproc.Report("greeting", `{"hello":"world"}`))
	require.NotEqual(t, "fail", os.Getenv(modeEnv), "asked to fail")
}

// A child becomes ready, stops when asked, and its last report arrives.
func TestStop(t *testing.T) {
	t.Parallel()
	p := testproc.Start(t, "TestChild")
	got, ok := p.Reported("greeting")
	require.True(t, ok)
	require.JSONEq(t, `{"hello":"early"}`, got)
	require.NoError(t, p.Stop())
	require.NoError(t, p.Stop(), "stopping again returns the same")
	got, ok = p.Reported("greeting")
	require.True(t, ok)
	require.JSONEq(t, `{"hello":"world"}`, got)
	_, ok = p.Reported("farewell")
	require.False(t, ok)
	require.Contains(t, p.Output(), "--- PASS: TestChild")
}

// A helper test that fails makes Stop return an error, with the reason in
// the output.
func TestStopFailed(t *testing.T) {
	t.Parallel()
	p := testproc.Start(t, "TestChild", modeEnv+"=fail")
	var exit *exec.ExitError
	require.ErrorAs(t, p.Stop(), &exit)
	require.Contains(t, p.Output(), "asked to fail")
}

// A killed child reports nothing more, and its exit fails nothing.
func TestKill(t *testing.T) {
	t.Parallel()
	p := testproc.Start(t, "TestChild", modeEnv+"=fail")
	p.Kill()
	var exit *exec.ExitError
	require.ErrorAs(t, p.Stop(), &exit)
	got, _ := p.Reported("greeting")
	require.JSONEq(t, `{"hello":"early"}`, got)
}

// Reports are one line under a key without spaces.
func TestReportRefuses(t *testing.T) {
	t.Parallel()
	require.Error(t, testproc.Report("two words", "x"))
	require.Error(t, testproc.Report("key", "two\nlines"))
	require.Error(t, testproc.Report("", "x"))
}
