package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/signature"
)

// Messages with the same ordering key are processed one at a time, in
// receipt order; a failing one holds the later ones of its key until it
// succeeds, and no other key waits for it.
func TestOrderingKeyProcessesInReceiptOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	verifier := signature.NewStandardWebhooks(signature.Secrets{testSecret}, nil)
	b := setup(t, &setupOpts{cfg: &inbox.Config{Sources: []inbox.Source{
		{Name: "payments", Verifier: verifier, OrderingFields: []string{"data.subscription"}},
	}}})
	_, err := b.pool.Exec(ctx, "CREATE TABLE applied (event_id text NOT NULL, subscription text NOT NULL, n serial)")
	require.NoError(t, err)

	var mu sync.Mutex
	failuresLeft := map[string]int{"evt_a1": 3}
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		mu.Lock()
		fail := failuresLeft[msg.EventID] > 0
		if fail {
			failuresLeft[msg.EventID]--
		}
		mu.Unlock()
		if fail {
			return errors.New("not yet")
		}
		_, err := tx.Exec(ctx, "INSERT INTO applied (event_id, subscription) VALUES ($1, $2)", msg.EventID, msg.OrderingKey)
		return err
	})

	send := func(id, sub string) {
		body := fmt.Appendf(nil, `{"type":"subscription.updated","data":{"subscription":%q}}`, sub)
		a := do(t, b.signed(t, "payments", id, body, time.Now()))
		require.Equal(t, http.StatusOK, a.Status, a.RawBody)
	}
	// Received one by one, so that receipt order is unambiguous.
	send("evt_a1", "sub_a")
	send("evt_b1", "sub_b")
	send("evt_a2", "sub_a")
	send("evt_a3", "sub_a")
	send("evt_b2", "sub_b")
	send("evt_none", "") // no key: no order

	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed)

	order := map[string][]string{}
	rows, err := b.pool.Query(ctx, "SELECT event_id, subscription FROM applied ORDER BY n")
	require.NoError(t, err)
	for rows.Next() {
		var id, sub string
		require.NoError(t, rows.Scan(&id, &sub))
		order[sub] = append(order[sub], id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"evt_a1", "evt_a2", "evt_a3"}, order["sub_a"])
	require.Equal(t, []string{"evt_b1", "evt_b2"}, order["sub_b"])
	require.Equal(t, []string{"evt_none"}, order[""])

	// sub_b did not wait for sub_a's failures: both of its messages were
	// applied before evt_a1 finally was.
	var a1, b2 int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT n FROM applied WHERE event_id = 'evt_a1'").Scan(&a1))
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT n FROM applied WHERE event_id = 'evt_b2'").Scan(&b2))
	require.Less(t, b2, a1, "another key was held by sub_a's failing message")

	// Waiting used no attempts: evt_a1 took three failures and a success,
	// every other message its one success.
	attempts := map[string]int32{}
	rows, err = b.pool.Query(ctx, "SELECT event_id, attempts FROM wharf_inbox_messages")
	require.NoError(t, err)
	for rows.Next() {
		var id string
		var n int32
		require.NoError(t, rows.Scan(&id, &n))
		attempts[id] = n
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int32{"evt_a1": 4, "evt_a2": 1, "evt_a3": 1, "evt_b1": 1, "evt_b2": 1, "evt_none": 1}, attempts)
}

// A message that fails for good is dead and releases the later ones of its
// key; an operator's Skip does the same for one still retrying.
func TestOrderingDeadOrSkippedReleasesTheKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 1000}})
	createEffects(t, b.pool)
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		switch msg.EventID {
		case "evt_perm":
			return inbox.Permanent(errors.New("bad payload"))
		case "evt_stuck":
			return errors.New("the downstream is down")
		}
		return applyEffect(ctx, tx, msg)
	})
	msgs := []inbox.Incoming{
		{Source: "payments", EventID: "evt_perm", Body: []byte(`{}`), OrderingKey: "k1"},
		{Source: "payments", EventID: "evt_after_perm", Body: []byte(`{}`), OrderingKey: "k1"},
		{Source: "payments", EventID: "evt_stuck", Body: []byte(`{}`), OrderingKey: "k2"},
		{Source: "payments", EventID: "evt_after_stuck", Body: []byte(`{}`), OrderingKey: "k2"},
	}
	for _, m := range msgs {
		receiveMany(t, b.pool, b.inbox, []inbox.Incoming{m})
	}
	b.startWorkers(t)
	require.Eventually(t, func() bool { return effectCount(t, b.pool, "evt_after_perm") == 1 }, 20*time.Second, 10*time.Millisecond,
		"a dead message releases its key")

	stuck := messageByEvent(t, b, "evt_stuck")
	require.Zero(t, effectCount(t, b.pool, "evt_after_stuck"), "held while evt_stuck retries")
	require.NoError(t, b.inbox.Skip(ctx, stuck.ID, "downstream retired"))
	require.Eventually(t, func() bool { return effectCount(t, b.pool, "evt_after_stuck") == 1 }, 20*time.Second, 10*time.Millisecond,
		"a skipped message releases its key")
	got, err := b.inbox.Get(ctx, stuck.ID)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDead, got.Status)
	require.Contains(t, got.LastError, "skipped by an operator: downstream retired")
	require.ErrorIs(t, b.inbox.Skip(ctx, stuck.ID, "again"), inbox.ErrNotSkippable)
}

func messageByEvent(t *testing.T, b *testBundle, eventID string) *inbox.Message {
	t.Helper()
	res, err := b.inbox.List(context.Background(), &inbox.ListParams{Source: "payments"})
	require.NoError(t, err)
	for _, m := range res {
		if m.EventID == eventID {
			return m
		}
	}
	t.Fatalf("no message %s", eventID)
	return nil
}

// Under load (batches, 10 keys, handlers that fail now and then, several
// workers) each key's messages are still applied in receipt order, each
// once.
func TestOrderingHoldsUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	_, err := b.pool.Exec(ctx, "CREATE TABLE applied (key text NOT NULL, seq int NOT NULL, n serial)")
	require.NoError(t, err)
	var mu sync.Mutex
	failed := map[string]bool{}
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		var seq int
		_, err := fmt.Sscanf(msg.EventID, "evt_%d", &seq)
		if err != nil {
			return inbox.Permanent(err)
		}
		mu.Lock()
		fail := seq%7 == 3 && !failed[msg.EventID] // every seventh fails once
		failed[msg.EventID] = true
		mu.Unlock()
		if fail {
			return errors.New("transient")
		}
		_, err = tx.Exec(ctx, "INSERT INTO applied (key, seq) VALUES ($1, $2)", msg.OrderingKey, seq)
		return err
	})
	const total, keys = 400, 10
	for start := 0; start < total; start += 50 {
		var batch []inbox.Incoming
		for i := start; i < start+50; i++ {
			batch = append(batch, inbox.Incoming{Source: "payments", EventID: fmt.Sprintf("evt_%d", i), Body: []byte(`{}`),
				OrderingKey: fmt.Sprintf("key_%d", i%keys)})
		}
		receiveMany(t, b.pool, b.inbox, batch)
	}
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed)

	rows, err := b.pool.Query(ctx, "SELECT key, seq FROM applied ORDER BY n")
	require.NoError(t, err)
	last := map[string]int{}
	count := 0
	for rows.Next() {
		var key string
		var seq int
		require.NoError(t, rows.Scan(&key, &seq))
		prev, seen := last[key]
		require.True(t, !seen || seq > prev, "%s: evt_%d applied after evt_%d", key, seq, prev)
		last[key] = seq
		count++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, total, count, "each message applied once")
}
