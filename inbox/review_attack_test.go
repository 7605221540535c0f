package inbox_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/signature"
)

// TestUnsignedSchemeIDHeaderCannotMintEvents: a NewHMAC source whose Events
// names an id header that its Template does not sign, and a body id field,
// dedupes on the signed body id: one capture replayed with fresh header ids
// is one event.
func TestUnsignedSchemeIDHeaderCannotMintEvents(t *testing.T) {
	t.Parallel()
	const secret = "hmac-secret-for-replay-test"
	verifier, err := signature.NewHMAC(signature.Secrets{secret}, signature.HMACConfig{
		SignatureHeader: "X-Signature",
		Events:          signature.EventLocation{IDHeader: "X-Webhook-Id", IDField: "id"},
	}, nil)
	require.NoError(t, err)
	b := setup(t, &setupOpts{cfg: &inbox.Config{Sources: []inbox.Source{{Name: "hmac", Verifier: verifier}}}})
	body := `{"id":"evt_signed","type":"payment.succeeded"}`
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(body))
	sig := hex.EncodeToString(mac.Sum(nil))
	statuses := map[string]int{}
	for i := range 5 {
		req, err := http.NewRequest(http.MethodPost, b.server.URL+"/webhooks/hmac", bytes.NewReader([]byte(body)))
		require.NoError(t, err)
		req.Header.Set("X-Signature", sig)
		req.Header.Set("X-Webhook-Id", fmt.Sprintf("forged-%d", i))
		a := do(t, req)
		require.Equal(t, http.StatusOK, a.Status, a.RawBody)
		statuses[a.Body["status"].(string)]++
	}
	require.Equal(t, map[string]int{"accepted": 1, "duplicate": 4}, statuses)
}

// TestHandlerErrorWithNULIsRecorded: a handler error holding a NUL byte or
// invalid UTF-8 (a binary body quoted with %s) is recorded, made storable,
// and its message turns dead as the error asks.
func TestHandlerErrorWithNULIsRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(_ context.Context, _ pgx.Tx, msg *inbox.Message) error {
		return inbox.Permanent(fmt.Errorf("bad payload: %s", "\x00\xff"))
	})
	events := b.startWorkers(t)
	res := receiveMany(t, b.pool, b.inbox, payments("evt_nul"))
	require.NoError(t, res[0].Err)
	awaitJob(t, events, river.EventKindJobCancelled)
	time.Sleep(200 * time.Millisecond)
	msg, err := b.inbox.Get(t.Context(), res[0].MessageID)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDead, msg.Status, "a permanently failed message must be dead; last_error=%q", msg.LastError)
}
