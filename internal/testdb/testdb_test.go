package testdb

import (
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

type recordingTB struct{ failure string }

func (r *recordingTB) Helper() {}
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.failure = fmt.Sprintf(format, args...)
}

// TestUnreachableServerFailsLoudly: with no server at the URL, a test fails
// (never skips) and the failure says how to start one, without the password.
func TestUnreachableServerFailsLoudly(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now

	url := "postgres://wharf:s3cret@" + addr + "/wharf?sslmode=disable"
	tb := &recordingTB{}
	requireReachable(tb, url, ping(url))
	require.Contains(t, tb.failure, "cannot reach Postgres at wharf@127.0.0.1")
	require.Contains(t, tb.failure, "make db")
	require.NotContains(t, tb.failure, "s3cret")

	reachable := &recordingTB{}
	requireReachable(reachable, URL(), ping(URL()))
	require.Empty(t, reachable.failure, "the configured test server answers")
}
