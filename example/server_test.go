package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServerSettingsMatchTheREADME: the example serves with the HTTP
// server settings the README recommends, every timeout set.
func TestServerSettingsMatchTheREADME(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	block := regexp.MustCompile(`(?s)server := &http\.Server\{\n(.*?)\n\s*\}`).FindSubmatch(readme)
	require.NotNil(t, block, "README has no recommended http.Server block")
	src, err := os.ReadFile("server.go")
	require.NoError(t, err)
	var fields int
	for _, line := range strings.Split(string(block[1]), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "Addr:") || strings.HasPrefix(line, "Handler:") {
			continue
		}
		fields++
		require.Contains(t, string(src), line, "README recommends a setting the example does not use")
	}
	require.Equal(t, 5, fields, "README block: %s", block[1])

	s := newServer(nil)
	require.NotZero(t, s.ReadHeaderTimeout)
	require.NotZero(t, s.ReadTimeout)
	require.NotZero(t, s.WriteTimeout)
	require.NotZero(t, s.IdleTimeout)
	require.NotZero(t, s.MaxHeaderBytes)
}
