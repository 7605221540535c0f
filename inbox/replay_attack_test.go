package inbox_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/signature"
)

// TestUnsignedEventIDHeaderCannotMintEvents: one captured, validly signed
// request replayed with a fresh X-Event-ID each time is one event, not many,
// whether or not its body carries an id. The signature of a NewHMAC source
// covers only the body, so the header is the attacker's to choose.
func TestUnsignedEventIDHeaderCannotMintEvents(t *testing.T) {
	t.Parallel()
	const secret = "hmac-secret-for-replay-test"
	verifier, err := signature.NewHMAC(signature.Secrets{secret}, signature.HMACConfig{SignatureHeader: "X-Signature"}, nil)
	require.NoError(t, err)
	b := setup(t, &setupOpts{cfg: &inbox.Config{Sources: []inbox.Source{{Name: "hmac", Verifier: verifier}}}})

	for _, body := range []string{`{"id":"evt_signed","type":"payment.succeeded"}`, `{"type":"payment.succeeded","amount":5}`} {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(body))
		sig := hex.EncodeToString(mac.Sum(nil))
		statuses := map[string]int{}
		for i := range 5 {
			req, err := http.NewRequest(http.MethodPost, b.server.URL+"/webhooks/hmac", bytes.NewReader([]byte(body)))
			require.NoError(t, err)
			req.Header.Set("X-Signature", sig)
			req.Header.Set(inbox.HeaderEventID, fmt.Sprintf("forged-%d", i))
			a := do(t, req)
			require.Equal(t, http.StatusOK, a.Status, a.RawBody)
			statuses[a.Body["status"].(string)]++
		}
		require.Equal(t, map[string]int{"accepted": 1, "duplicate": 4}, statuses, "body %s", body)
	}
	keys, messages, _ := b.counts(t)
	require.Equal(t, 2, keys)
	require.Equal(t, 2, messages)
	var forged int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM wharf_inbox_keys WHERE event_id LIKE 'forged-%'").Scan(&forged))
	require.Zero(t, forged, "an unsigned X-Event-ID became an event id")
}

// TestTokenHeadersAreNotStored: credentials, the shared-token headers of
// other providers' schemes and a source's own DropHeaders never reach the
// database; the other headers do.
func TestTokenHeadersAreNotStored(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{cfg: &inbox.Config{Sources: []inbox.Source{{
		Name:        "payments",
		Verifier:    signature.NewStandardWebhooks(signature.Secrets{testSecret}, nil),
		DropHeaders: []string{"X-Partner-Token"},
	}}}})
	req := b.signed(t, "payments", "msg_tokens", []byte(`{"type":"t"}`), time.Now())
	secrets := map[string]string{
		"Authorization":        "Bearer tok-authorization",
		"X-Gitlab-Token":       "tok-gitlab",
		"X-Goog-Channel-Token": "tok-goog",
		"X-Partner-Token":      "tok-partner",
		"Cookie":               "session=tok-cookie",
	}
	for k, v := range secrets {
		req.Header.Set(k, v)
	}
	req.Header.Set("X-Request-Id", "kept-1")
	a := do(t, req)
	require.Equal(t, http.StatusOK, a.Status, a.RawBody)

	var stored string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT headers::text FROM wharf_inbox_messages").Scan(&stored))
	require.Contains(t, stored, "kept-1")
	require.Contains(t, stored, "Webhook-Signature", "signature headers are kept")
	require.NotContains(t, stored, "tok-", "a token reached the database: %s", stored)
}

// TestSlowInsertPathAnswers503AndLosesNothing: when the insert path is
// slower than ReceiveTimeout (a slow disk, a lock held elsewhere), the
// sender gets 503 and nothing is written; once the database is fast again
// the retry is accepted exactly once.
func TestSlowInsertPathAnswers503AndLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, &setupOpts{cfg: &inbox.Config{ReceiveTimeout: 300 * time.Millisecond}})
	body := []byte(`{"type":"payment.succeeded"}`)

	// Another transaction holds the keys table: every claim waits.
	blocker, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = blocker.Exec(ctx, "LOCK TABLE wharf_inbox_keys IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	a := do(t, b.signed(t, "payments", "evt_slow", body, time.Now()))
	require.Equal(t, http.StatusServiceUnavailable, a.Status, a.RawBody)
	require.NoError(t, blocker.Rollback(ctx))

	keys, messages, jobs := b.counts(t)
	require.Zero(t, keys+messages+jobs, "a 503 wrote something")
	a = do(t, b.signed(t, "payments", "evt_slow", body, time.Now()))
	require.Equal(t, http.StatusOK, a.Status, a.RawBody)
	require.Equal(t, "accepted", a.Body["status"])
	a = do(t, b.signed(t, "payments", "evt_slow", body, time.Now()))
	require.Equal(t, "duplicate", a.Body["status"])
	keys, messages, _ = b.counts(t)
	require.Equal(t, 1, keys)
	require.Equal(t, 1, messages)
}

// TestInvalidVerifierOptionsAnswer503: a verifier whose Options are invalid
// (a negative tolerance) is the receiver's fault, not the sender's: the
// request is answered 503, so the sender retries once the config is fixed,
// and the log names the configuration, not a missing secret.
func TestInvalidVerifierOptionsAnswer503(t *testing.T) {
	t.Parallel()
	logged := &testdb.LockedBuffer{}
	verifier := signature.NewStandardWebhooks(signature.Secrets{testSecret}, &signature.Options{Tolerance: -5 * time.Minute})
	b := setup(t, &setupOpts{cfg: &inbox.Config{
		Sources: []inbox.Source{{Name: "payments", Verifier: verifier}},
		Logger:  slog.New(slog.NewTextHandler(logged, nil)),
	}})
	a := do(t, b.signed(t, "payments", "evt_cfg", []byte(`{"type":"a"}`), time.Now()))
	require.Equal(t, http.StatusServiceUnavailable, a.Status, a.RawBody)
	keys, messages, jobs := b.counts(t)
	require.Zero(t, keys+messages+jobs)
	require.Contains(t, logged.String(), "invalid verifier options")
	require.NotContains(t, logged.String(), "no usable signing secret")
}
