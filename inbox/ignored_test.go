package inbox_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/telemetrytest"
	"github.com/wharfhq/wharf/signature"
)

// TestIgnoredTypes: a source's AcceptTypes and IgnoreTypes decide which
// verified events are stored. An ignored one is answered 200 "ignored",
// keeps its dedupe key (a redelivery is answered "ignored" again) and
// stores no message, body or job; each answer is counted by result.
func TestIgnoredTypes(t *testing.T) {
	t.Parallel()
	metrics := telemetrytest.NewMetrics(t)
	verifier := signature.NewStandardWebhooks(signature.Secrets{testSecret}, nil)
	b := setup(t, &setupOpts{cfg: &inbox.Config{
		MeterProvider: metrics.Provider,
		Sources: []inbox.Source{{
			Name: "payments", Verifier: verifier,
			AcceptTypes: []string{"payment.*", "refund.issued"},
			IgnoreTypes: []string{"payment.pending"},
		}},
	}})
	ctx := context.Background()
	send := func(id, typ string) answer {
		return do(t, b.signed(t, "payments", id, []byte(fmt.Sprintf(`{"type":%q,"secret":"s3cr3t"}`, typ)), b.clock.Now()))
	}
	for id, typ := range map[string]string{"e1": "payment.succeeded", "e2": "refund.issued", "e3": "payment.failed"} {
		a := send(id, typ)
		require.Equal(t, http.StatusOK, a.Status, a.RawBody)
		require.Equal(t, "accepted", a.Body["status"], "%s %s", id, typ)
	}
	for id, typ := range map[string]string{"i1": "customer.created", "i2": "payment.pending", "i3": "refund.issuedx", "i4": ""} {
		a := send(id, typ)
		require.Equal(t, http.StatusOK, a.Status, a.RawBody)
		require.Equal(t, map[string]any{"status": "ignored", "event_id": id}, a.Body, "%s %q", id, typ)
	}
	again := send("i1", "customer.created")
	require.Equal(t, "ignored", again.Body["status"], "a redelivery of an ignored event")
	require.Equal(t, "duplicate", send("e1", "payment.succeeded").Body["status"])

	keys, messages, jobs := b.counts(t)
	require.Equal(t, []int{7, 3, 3}, []int{keys, messages, jobs}, "a key for each event, a message and a job for the stored ones")
	var ignored int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM wharf_inbox_keys WHERE ignored").Scan(&ignored))
	require.Equal(t, 4, ignored)
	var bodies int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM wharf_inbox_messages WHERE event_id LIKE 'i%'").Scan(&bodies))
	require.Zero(t, bodies, "no ignored event's body stored")

	got := telemetrytest.SumBy(t, metrics.Collect(t)["wharf_inbox_requests"], "source", "result")
	require.Equal(t, map[string]int64{"payments/accepted": 3, "payments/ignored": 5, "payments/duplicate": 1}, got)
}

// TestReceiveTxHonoursIgnoredTypes: ReceiveManyTx ignores, for a source of
// Config.Sources, the types it does not accept, with the same results;
// a source it does not list stores every type.
func TestReceiveTxHonoursIgnoredTypes(t *testing.T) {
	t.Parallel()
	verifier := signature.NewStandardWebhooks(signature.Secrets{testSecret}, nil)
	b := setup(t, &setupOpts{cfg: &inbox.Config{
		Sources: []inbox.Source{{Name: "payments", Verifier: verifier, IgnoreTypes: []string{"ping"}}},
	}})
	results := receiveMany(t, b.pool, b.inbox, []inbox.Incoming{
		{Source: "payments", EventID: "p1", EventType: "ping", Body: []byte(`{}`)},
		{Source: "payments", EventID: "p2", EventType: "push", Body: []byte(`{}`)},
		{Source: "payments", EventID: "p1", EventType: "ping", Body: []byte(`{}`)},
		{Source: "queue", EventID: "q1", EventType: "ping", Body: []byte(`{}`)},
	})
	require.True(t, results[0].Ignored)
	require.Zero(t, results[0].JobID)
	require.False(t, results[1].Ignored)
	require.NotZero(t, results[1].JobID)
	require.True(t, results[2].Ignored && results[2].Duplicate, "a repeat of an ignored event in the batch")
	require.False(t, results[3].Ignored, "a source Config.Sources does not list ignores nothing")
	keys, messages, _ := b.counts(t)
	require.Equal(t, []int{3, 2}, []int{keys, messages})
	_, err := b.inbox.Get(context.Background(), results[0].MessageID)
	require.ErrorIs(t, err, inbox.ErrNotFound, "an ignored event has no message")
}

// TestIgnoredTypePatternsAreChecked: a type list entry that is not a type,
// "prefix.*" or "*" is refused with the rest of the config's problems.
func TestIgnoredTypePatternsAreChecked(t *testing.T) {
	t.Parallel()
	verifier := signature.NewStandardWebhooks(signature.Secrets{testSecret}, nil)
	cfg := &inbox.Config{Sources: []inbox.Source{{
		Name: "payments", Verifier: verifier, AcceptTypes: []string{"payment.*", "pay*ment", ""}, IgnoreTypes: []string{"a b"},
	}}}
	err := cfg.Validate()
	require.ErrorIs(t, err, inbox.ErrInvalidConfig)
	for _, bad := range []string{`"pay*ment"`, `type ""`, `"a b"`} {
		require.ErrorContains(t, err, bad)
	}
	require.NotContains(t, err.Error(), `"payment.*"`)
}
