package wharf_test

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The CI script downloads Go (when the machine has none recent enough)
// from the module proxy $GOPROXY names, never from an address of its own:
// scripts/goproxy-url.sh picks the first proxy, or fails and says how to
// name one.
func TestGoProxyURLComesFromTheEnvironment(t *testing.T) {
	t.Parallel()
	ci, err := os.ReadFile(".ci/run")
	require.NoError(t, err)
	require.NotContains(t, string(ci), "proxy.golang.org", ".ci/run names a registry address")
	require.Contains(t, string(ci), "scripts/goproxy-url.sh")
	for goproxy, want := range map[string]string{
		"https://proxy.example.com/,direct":       "https://proxy.example.com",
		"direct,https://b.example|https://c.test": "https://b.example",
		"proxy.example.com":                       "https://proxy.example.com",
		"file:///srv/goproxy":                     "file:///srv/goproxy",
		"":                                        "",
		"direct":                                  "",
		"off,https://never.example":               "",
	} {
		cmd := exec.Command("scripts/goproxy-url.sh")
		cmd.Env = append(os.Environ(), "GOPROXY="+goproxy)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		require.Equal(t, want, strings.TrimSpace(stdout.String()), goproxy)
		if want == "" {
			require.Error(t, err, goproxy)
			require.Contains(t, stderr.String(), "names no module proxy", goproxy)
			require.Contains(t, stderr.String(), "set it to one", goproxy)
		} else {
			require.NoError(t, err, "%s: %s", goproxy, stderr.String())
		}
	}
}
