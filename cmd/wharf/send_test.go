package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/signature"
)

// TestSend: `wharf send` signs with each scheme so that the inbox accepts
// it, the same -id twice is accepted then a duplicate, and an answer other
// than 2xx exits 1 with the status printed.
func TestSend(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	pool := testdb.New(t)
	ib, err := inbox.New(pool, &inbox.Config{Sources: []inbox.Source{
		{Name: "standard", Verifier: signature.NewStandardWebhooks(signature.Secrets{secret}, nil)},
		{Name: "stripe", Verifier: signature.NewStripe(signature.Secrets{secret}, nil)},
		{Name: "github", Verifier: signature.NewGitHub(signature.Secrets{secret}, nil)},
	}})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/webhooks/{source}", ib.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	for _, scheme := range []string{"standard", "stripe", "github"} {
		args := []string{"send", "-url", srv.URL + "/webhooks/" + scheme, "-secret", secret, "-scheme", scheme, "-id", "evt_" + scheme, "-H", "X-GitHub-Event: push", `{"type":"payment.succeeded"}`}
		code, out, errOut := cli(t, args...)
		require.Equal(t, 0, code, "%s: %s%s", scheme, out, errOut)
		require.Contains(t, out, "200 OK")
		require.Contains(t, out, `"status":"accepted"`)
		require.Contains(t, out, `"event_id":"evt_`+scheme+`"`)
		code, out, _ = cli(t, args...)
		require.Equal(t, 0, code)
		require.Contains(t, out, `"status":"duplicate"`, scheme)
	}

	// A fresh id by default, and the body from a file.
	file := filepath.Join(t.TempDir(), "event.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"type":"a"}`), 0o600))
	code, out, errOut := cli(t, "send", "-url", srv.URL+"/webhooks/standard", "-secret", secret, "@"+file)
	require.Equal(t, 0, code, out+errOut)
	require.Contains(t, out, `"status":"accepted"`)

	code, out, errOut = cli(t, "send", "-url", srv.URL+"/webhooks/standard", "-secret", "whsec_d3Jvbmctc2VjcmV0LWZvci10aGUtdGVzdA==", `{}`)
	require.Equal(t, 1, code)
	require.Contains(t, out, "401 Unauthorized")
	require.Contains(t, errOut, "answered 401")
	require.NotContains(t, out+errOut, "d3Jvbmctc2VjcmV0", "a secret was printed")

	for _, bad := range [][]string{
		{"send", "-url", "ftp://x", "-secret", secret, `{}`},
		{"send", "-url", srv.URL, `{}`},
		{"send", "-url", srv.URL, "-secret", secret, `not json`},
		{"send", "-url", srv.URL, "-secret", secret, "-scheme", "nope", `{}`},
		{"send", "-url", srv.URL, "-secret", secret, "-scheme", "stripe", `[1]`},
	} {
		code, _, errOut := cli(t, bad...)
		require.Equal(t, 2, code, "%v: %s", bad, errOut)
	}
}

// TestUsageHidesThePassword: `wharf -h` names DATABASE_URL but never
// prints its value.
func TestUsageHidesThePassword(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://app:s3cr3t-pw@db.internal:5432/app")
	for _, args := range [][]string{{"-h"}, {}, {"nope"}} {
		_, out, errOut := cli(t, args...)
		require.Contains(t, errOut, "DATABASE_URL")
		require.NotContains(t, out+errOut, "s3cr3t-pw")
	}
}
