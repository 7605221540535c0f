package inbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/signature"
)

// The sender's Standard Webhooks secret. A real one comes from the sender's
// dashboard and a secret store, never from code.
const paymentsSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// A message received in a transaction of the application's own (from a
// queue consumer, say), processed exactly once by a River worker whose
// handler writes through the transaction that marks it processed; the same
// event received again is a duplicate and changes nothing.
func ExampleInbox_ReceiveTx() {
	ctx := context.Background()
	pool, cleanup := testdb.ForExample() // a pool on a database migrated with wharf.Migrate
	defer cleanup()
	if _, err := pool.Exec(ctx, `
		CREATE TABLE balances (account text PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO balances VALUES ('acct_1', 0)`); err != nil {
		fmt.Println(err)
		return
	}

	ib, err := inbox.New(pool, nil) // ReceiveTx accepts any source name; HTTP needs Config.Sources
	if err != nil {
		fmt.Println(err)
		return
	}
	ib.Handle("payments", "payment.succeeded", func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		var ev struct {
			Data struct {
				Account string `json:"account"`
				Amount  int64  `json:"amount"`
			} `json:"data"`
		}
		if err := json.Unmarshal(msg.Body, &ev); err != nil {
			return inbox.Permanent(err) // dead at once: retrying cannot fix a malformed body
		}
		_, err := tx.Exec(ctx, "UPDATE balances SET balance = balance + $1 WHERE account = $2",
			ev.Data.Amount, ev.Data.Account)
		return err
	})

	// The application's River client works the inbox's queue.
	workers := river.NewWorkers()
	if err := ib.AddWorkers(workers); err != nil {
		fmt.Println(err)
		return
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:        map[string]river.QueueConfig{ib.Queue(): {MaxWorkers: 2}},
		Workers:       workers,
		FetchCooldown: 10 * time.Millisecond,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	finished, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
	defer cancel()
	if err := client.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		if err := client.Stop(ctx); err != nil {
			fmt.Println(err)
		}
	}()

	receive := func(eventID string, body []byte) (*inbox.Result, error) {
		var res *inbox.Result
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			res, err = ib.ReceiveTx(ctx, tx, inbox.Incoming{
				Source:    "payments",
				EventID:   eventID,
				EventType: "payment.succeeded",
				Body:      body,
			})
			return err
		})
		return res, err
	}
	balance := func() int64 {
		var b int64
		if err := pool.QueryRow(ctx, "SELECT balance FROM balances WHERE account = 'acct_1'").Scan(&b); err != nil {
			fmt.Println(err)
		}
		return b
	}

	body := []byte(`{"type":"payment.succeeded","data":{"account":"acct_1","amount":125}}`)
	res, err := receive("evt_1", body)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("evt_1 duplicate:", res.Duplicate)

	// Wait for the job to finish, as a test would; an application does not.
	select {
	case ev := <-finished:
		fmt.Println("job:", ev.Kind)
	case <-time.After(20 * time.Second):
		fmt.Println("not processed within 20s")
		return
	}
	fmt.Println("balance:", balance())

	// The sender retries: nothing is stored or enqueued again.
	res, err = receive("evt_1", body)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("evt_1 again duplicate:", res.Duplicate)
	fmt.Println("balance:", balance())

	// Output:
	// evt_1 duplicate: false
	// job: job_completed
	// balance: 125
	// evt_1 again duplicate: true
	// balance: 125
}

// ReceiveManyTx stores a batch in one transaction, each message with its own
// verdict: an event id repeated within the batch is a duplicate of the first,
// and a message that cannot be stored is refused while its neighbours are
// received.
func ExampleInbox_ReceiveManyTx() {
	ctx := context.Background()
	pool, cleanup := testdb.ForExample()
	defer cleanup()
	ib, err := inbox.New(pool, nil)
	if err != nil {
		fmt.Println(err)
		return
	}

	msgs := []inbox.Incoming{
		{Source: "orders", EventID: "ord_1", EventType: "order.created", Body: []byte(`{"id":"ord_1"}`)},
		{Source: "orders", EventID: "ord_2", EventType: "order.created", Body: []byte(`{"id":"ord_2"}`)},
		{Source: "orders", EventID: "ord_1", EventType: "order.created", Body: []byte(`{"id":"ord_1"}`)},
		{Source: "orders", EventID: "", EventType: "order.created", Body: []byte(`{}`)},
	}
	var results []inbox.Result
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		results, err = ib.ReceiveManyTx(ctx, tx, msgs)
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, res := range results {
		switch {
		case res.Err != nil:
			fmt.Printf("%q refused, invalid: %t\n", msgs[i].EventID, errors.Is(res.Err, inbox.ErrInvalidMessage))
		case res.Duplicate:
			fmt.Printf("%q duplicate\n", msgs[i].EventID)
		default:
			fmt.Printf("%q received\n", msgs[i].EventID)
		}
	}
	// A River client working ib.Queue() with ib's workers now processes
	// ord_1 and ord_2, in one job (see Config.BatchSize).

	// Output:
	// "ord_1" received
	// "ord_2" received
	// "ord_1" duplicate
	// "" refused, invalid: true
}

// A BatchHandler applies the messages of a processing batch together: here
// one upsert for all the payments of a run (summed per account, accounts in
// order), in the savepoint that marks them all processed.
func ExampleInbox_HandleBatch() {
	ctx := context.Background()
	pool, cleanup := testdb.ForExample()
	defer cleanup()
	if _, err := pool.Exec(ctx, `CREATE TABLE balances (account text PRIMARY KEY, balance bigint NOT NULL)`); err != nil {
		fmt.Println(err)
		return
	}
	ib, err := inbox.New(pool, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	calls := make(chan int, 10) // messages per call, for the output below
	ib.HandleBatch("payments", "payment.succeeded", func(ctx context.Context, tx pgx.Tx, msgs []*inbox.Message) error {
		calls <- len(msgs)
		totals := map[string]int64{}
		for _, msg := range msgs {
			var ev struct {
				Data struct {
					Account string `json:"account"`
					Amount  int64  `json:"amount"`
				} `json:"data"`
			}
			if err := json.Unmarshal(msg.Body, &ev); err != nil {
				// The run is rolled back and goes again message by
				// message: only this one is dead.
				return inbox.Permanent(err)
			}
			totals[ev.Data.Account] += ev.Data.Amount
		}
		accounts := slices.Sorted(maps.Keys(totals))
		amounts := make([]int64, len(accounts))
		for i, a := range accounts {
			amounts[i] = totals[a]
		}
		_, err := tx.Exec(ctx, `INSERT INTO balances (account, balance)
			SELECT * FROM unnest($1::text[], $2::bigint[]) ORDER BY 1
			ON CONFLICT (account) DO UPDATE SET balance = balances.balance + excluded.balance`, accounts, amounts)
		return err
	})

	msgs := make([]inbox.Incoming, 3)
	for i, amount := range []int{100, 20, 3} {
		msgs[i] = inbox.Incoming{
			Source: "payments", EventID: fmt.Sprintf("evt_%d", i), EventType: "payment.succeeded",
			Body: fmt.Appendf(nil, `{"data":{"account":"acct_%d","amount":%d}}`, i%2, amount),
		}
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ib.ReceiveManyTx(ctx, tx, msgs) // one job for the three
		return err
	}); err != nil {
		fmt.Println(err)
		return
	}

	workers := river.NewWorkers()
	if err := ib.AddWorkers(workers); err != nil {
		fmt.Println(err)
		return
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{ib.Queue(): {MaxWorkers: 2}},
		Workers: workers,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	finished, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer cancel()
	if err := client.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		if err := client.Stop(ctx); err != nil {
			fmt.Println(err)
		}
	}()
	select {
	case ev := <-finished:
		fmt.Println("job:", ev.Kind)
	case <-time.After(20 * time.Second):
		fmt.Println("not processed within 20s")
		return
	}
	fmt.Println("messages in the call:", <-calls)
	rows, err := pool.Query(ctx, "SELECT account, balance FROM balances ORDER BY account")
	if err != nil {
		fmt.Println(err)
		return
	}
	for rows.Next() {
		var account string
		var balance int64
		if err := rows.Scan(&account, &balance); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(account, balance)
	}

	// Output:
	// job: job_completed
	// messages in the call: 3
	// acct_0 103
	// acct_1 20
}

// The HTTP receiver verifies the signature, dedupes and stores in one
// transaction, and answers JSON only after the commit: the same delivery
// sent twice is accepted, then a duplicate; one whose body was altered is
// refused.
func ExampleInbox_Handler() {
	pool, cleanup := testdb.ForExample()
	defer cleanup()
	ib, err := inbox.New(pool, &inbox.Config{
		Sources: []inbox.Source{{
			Name:     "payments",
			Verifier: signature.NewStandardWebhooks(signature.Secrets{paymentsSecret}, nil),
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// A River client working ib.Queue() processes what is accepted (see
	// ExampleInbox_Receive); this example shows the answers only.

	mux := http.NewServeMux()
	mux.Handle("/webhooks/{source}", ib.Handler())
	server := httptest.NewServer(mux)
	defer server.Close()

	body := []byte(`{"type":"payment.succeeded","data":{"account":"acct_1","amount":125}}`)
	header, err := signature.SignStandardWebhooks([]string{paymentsSecret}, "evt_1", time.Now(), body)
	if err != nil {
		fmt.Println(err)
		return
	}
	post := func(body []byte) {
		req, err := http.NewRequest(http.MethodPost, server.URL+"/webhooks/payments", bytes.NewReader(body))
		if err != nil {
			fmt.Println(err)
			return
		}
		req.Header = header.Clone()
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			fmt.Println(err)
			return
		}
		var answer struct {
			Status     string `json:"status"`
			EventID    string `json:"event_id"`
			ReceivedAt string `json:"received_at"` // on a duplicate: when the event was first received
			Error      string `json:"error"`
		}
		if err := json.Unmarshal(raw, &answer); err != nil {
			fmt.Println(err)
			return
		}
		if answer.Error != "" {
			fmt.Println(resp.StatusCode, answer.Error)
			return
		}
		fmt.Println(resp.StatusCode, answer.Status, answer.EventID, "received_at set:", answer.ReceivedAt != "")
	}
	post(body) // the first delivery
	post(body) // the sender's retry
	post(bytes.Replace(body, []byte("125"), []byte("125000"), 1))

	// Output:
	// 200 accepted evt_1 received_at set: false
	// 200 duplicate evt_1 received_at set: true
	// 401 signature: no matching signature
}
