package inbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testdb"
)

// PaymentSucceeded is a payment provider's event, as its webhooks send it.
type PaymentSucceeded struct {
	Data struct {
		Account string `json:"account"`
		Amount  int64  `json:"amount"`
	} `json:"data"`
}

// TestHandleJSON: the handler gets each body decoded into its type; a body
// that does not decode is dead at once with the decoding error, and its
// handler never runs.
func TestHandleJSON(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 5}})
	var mu sync.Mutex
	got := map[string]PaymentSucceeded{}
	inbox.HandleJSON(b.inbox, "payments", "payment.succeeded", func(_ context.Context, _ pgx.Tx, msg *inbox.Message, ev *PaymentSucceeded) error {
		mu.Lock()
		defer mu.Unlock()
		got[msg.EventID] = *ev
		return nil
	})
	msgs := []inbox.Incoming{
		{Source: "payments", EventID: "good", EventType: "payment.succeeded", Body: []byte(`{"data":{"account":"acct_1","amount":125}}`)},
		{Source: "payments", EventID: "bad", EventType: "payment.succeeded", Body: []byte(`{"data":{"account":"acct_1","amount":"lots"}}`)},
	}
	for _, m := range msgs {
		receiveMany(t, b.pool, b.inbox, []inbox.Incoming{m})
	}
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed, inbox.StatusDead)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]PaymentSucceeded{"good": payment("acct_1", 125)}, got)
	bad := getMessage(t, b, "bad")
	require.Equal(t, inbox.StatusDead, bad.Status, "a body that cannot decode is permanent: no retries")
	require.Equal(t, 1, bad.Attempts)
	require.Contains(t, bad.LastError, "cannot unmarshal string")
	require.Contains(t, bad.LastError, "PaymentSucceeded")
}

// TestHandleBatchJSON: a batch handler gets the run's bodies decoded, in
// order; a body that does not decode fails the call, the messages go
// again alone, and only that one is dead.
func TestHandleBatchJSON(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var mu sync.Mutex
	var calls [][]string
	applied := map[string]int64{}
	inbox.HandleBatchJSON(b.inbox, "payments", "payment.succeeded", func(_ context.Context, _ pgx.Tx, msgs []*inbox.Message, evs []*PaymentSucceeded) error {
		mu.Lock()
		defer mu.Unlock()
		var ids []string
		for i, m := range msgs {
			ids = append(ids, m.EventID)
			applied[m.EventID] += evs[i].Data.Amount
		}
		calls = append(calls, ids)
		return nil
	})
	receiveMany(t, b.pool, b.inbox, []inbox.Incoming{
		{Source: "payments", EventID: "p1", EventType: "payment.succeeded", Body: []byte(`{"data":{"account":"a","amount":1}}`)},
		{Source: "payments", EventID: "p2", EventType: "payment.succeeded", Body: []byte(`{"data":{"account":"a","amount":2}}`)},
	})
	receiveMany(t, b.pool, b.inbox, []inbox.Incoming{
		{Source: "payments", EventID: "p3", EventType: "payment.succeeded", Body: []byte(`{"data":{"account":"a","amount":3}}`)},
		{Source: "payments", EventID: "broken", EventType: "payment.succeeded", Body: []byte(`{"data":[]}`)},
		{Source: "payments", EventID: "p4", EventType: "payment.succeeded", Body: []byte(`{"data":{"account":"a","amount":4}}`)},
	})
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed, inbox.StatusDead)
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, calls, []string{"p1", "p2"}, "a run decoded and applied in one call")
	require.Equal(t, map[string]int64{"p1": 1, "p2": 2, "p3": 3, "p4": 4}, applied, "each applied once")
	require.Equal(t, inbox.StatusDead, getMessage(t, b, "broken").Status)
	require.Contains(t, getMessage(t, b, "broken").LastError, "cannot unmarshal array")
}

func payment(account string, amount int64) PaymentSucceeded {
	var p PaymentSucceeded
	p.Data.Account, p.Data.Amount = account, amount
	return p
}

// getMessage returns the message of eventID from "payments".
func getMessage(t *testing.T, b *testBundle, eventID string) *inbox.Message {
	t.Helper()
	msg, err := b.inbox.Get(context.Background(), messageID(t, b, eventID))
	require.NoError(t, err)
	return msg
}

// A handler of a provider's event type: Wharf decodes each body into the
// type, so the handler gets a *PaymentSucceeded (a body that does not fit
// the type is dead at once, with the decoding error).
func ExampleHandleJSON() {
	ctx := context.Background()
	pool, cleanup := testdb.ForExample() // a pool on a database migrated with wharf.Migrate
	defer cleanup()
	ib, err := inbox.New(pool, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan struct{}, 1)
	inbox.HandleJSON(ib, "payments", "payment.succeeded",
		func(ctx context.Context, tx pgx.Tx, msg *inbox.Message, ev *PaymentSucceeded) error {
			fmt.Printf("%s: %d to %s\n", msg.EventID, ev.Data.Amount, ev.Data.Account)
			done <- struct{}{}
			return nil
		})

	workers := river.NewWorkers()
	if err := ib.AddWorkers(workers); err != nil {
		fmt.Println(err)
		return
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues: map[string]river.QueueConfig{ib.Queue(): {MaxWorkers: 2}}, Workers: workers, FetchCooldown: 10 * time.Millisecond,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := client.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = client.Stop(ctx) }()

	body := []byte(`{"type":"payment.succeeded","data":{"account":"acct_1","amount":125}}`)
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ib.ReceiveTx(ctx, tx, inbox.Incoming{Source: "payments", EventID: "evt_1", EventType: "payment.succeeded", Body: body})
		return err
	}); err != nil {
		fmt.Println(err)
		return
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		fmt.Println("not processed within 20s")
	}

	// Output:
	// evt_1: 125 to acct_1
}
