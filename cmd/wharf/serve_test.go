package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/dashtest"
	"github.com/wharfhq/wharf/internal/testdb"
)

// startServe runs `wharf serve` until the test ends and returns its base
// URL.
func startServe(t *testing.T, dbURL string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut testdb.LockedBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- runCLI(ctx, append([]string{"-database-url", dbURL, "serve", "-addr", "127.0.0.1:0"}, args...), &out, &errOut)
	}()
	t.Cleanup(func() {
		cancel()
		require.Equal(t, 0, <-exited, "serve exits 0 when stopped: %s", errOut.String())
	})
	re := regexp.MustCompile(`http://(127\.0\.0\.1:\d+)/`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return "http://" + m[1]
		}
		select {
		case code := <-exited:
			t.Fatalf("serve exited %d: %s", code, errOut.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "serve did not start: %s", errOut.String())
		time.Sleep(10 * time.Millisecond)
	}
}

func fetch(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// wharf serve: the dashboard, /metrics with the database's gauges and
// /healthz; with credentials in the environment every path but /healthz
// asks for them. Not parallel: it sets environment variables.
func TestServe(t *testing.T) {
	dbURL := testdb.NewURL(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	defer pool.Close()
	seed := dashtest.Seed(t, pool)

	t.Setenv(envServeToken, "tok-123")
	t.Setenv(envServeBasic, "ops:pa55")
	base := startServe(t, dbURL)
	get := func(path string, auth func(*http.Request)) (int, string) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		if auth != nil {
			auth(req)
		}
		return fetch(t, req)
	}
	code, body := get("/healthz", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)

	code, _ = get("/", nil)
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = get("/metrics", func(r *http.Request) { r.Header.Set("Authorization", "Bearer wrong") })
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = get("/", func(r *http.Request) { r.SetBasicAuth("ops", "wrong") })
	require.Equal(t, http.StatusUnauthorized, code)

	code, body = get("/", func(r *http.Request) { r.SetBasicAuth("ops", "pa55") })
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Messages per hour from billing")

	code, body = get("/metrics", func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok-123") })
	require.Equal(t, http.StatusOK, code)
	require.Regexp(t, `wharf_inbox_dead_messages\{source="billing"\} 3`, body)
	require.Regexp(t, `wharf_outbox_dead_deliveries\{[^}]*\} 2`, body)
	code, body = get("/inbox/"+seed.DeadMessage.String(), func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok-123") })
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, seed.DeadEventID)
	job := regexp.MustCompile(`href="(/riverui/jobs/\d+)"`).FindStringSubmatch(body)
	require.NotNil(t, job, "a message links to its River job in riverui")

	// riverui, mounted beside it, behind the same credentials.
	code, _ = get(job[1], nil)
	require.Equal(t, http.StatusUnauthorized, code)
	code, body = get(job[1], func(r *http.Request) { r.SetBasicAuth("ops", "pa55") })
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "<html")
	code, body = get(strings.Replace(job[1], "/riverui/", "/riverui/api/", 1), func(r *http.Request) { r.SetBasicAuth("ops", "pa55") })
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"kind":"wharf_inbox`, "riverui's API reads the message's job")
}

func TestServeRefusesAnExposedAddressWithoutAuth(t *testing.T) {
	t.Setenv(envServeToken, "")
	t.Setenv(envServeBasic, "")
	code, _, errOut := cli(t, "-database-url", "postgres://x@127.0.0.1:1/x", "serve", "-addr", "0.0.0.0:0")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "not a loopback address")

	t.Setenv(envServeBasic, "no-colon")
	code, _, errOut = cli(t, "serve")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "user:password")
	require.NotContains(t, errOut, "no-colon", "the credential is not echoed")
}

// Without credentials, loopback binding is the only protection: a request
// naming another host (a rebinding site resolving to 127.0.0.1) is refused.
// Not parallel: it sets environment variables.
func TestServeWithoutAuthAnswersLoopbackNamesOnly(t *testing.T) {
	t.Setenv(envServeToken, "")
	t.Setenv(envServeBasic, "")
	base := startServe(t, testdb.NewURL(t))
	for host, want := range map[string]int{
		"":                     http.StatusOK, // the URL's own 127.0.0.1:port
		"localhost:8081":       http.StatusOK,
		"[::1]:8081":           http.StatusOK,
		"evil.example:8081":    http.StatusMisdirectedRequest,
		"127.0.0.1.nip.io":     http.StatusMisdirectedRequest,
		"attacker.example.com": http.StatusMisdirectedRequest,
	} {
		req, err := http.NewRequest(http.MethodGet, base+"/inbox", nil)
		require.NoError(t, err)
		if host != "" {
			req.Host = host
		}
		code, _ := fetch(t, req)
		require.Equal(t, want, code, host)
	}
}
