package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/signature"
)

// An event published in the transaction that marks an invoice paid, then
// delivered by a River worker to a subscribed endpoint, which verifies the
// Standard Webhooks signature with the secret EndpointCreate returned.
func ExampleOutbox_PublishTx() {
	ctx := context.Background()
	pool, cleanup := testdb.ForExample() // a pool on a database migrated with wharf.Migrate
	defer cleanup()
	if _, err := pool.Exec(ctx, `
		CREATE TABLE invoices (id text PRIMARY KEY, paid boolean NOT NULL DEFAULT false);
		INSERT INTO invoices VALUES ('inv_1', false)`); err != nil {
		fmt.Println(err)
		return
	}

	// The SSRF guard refuses loopback and private addresses; the endpoint
	// below listens on loopback.
	ob, err := outbox.New(pool, &outbox.Config{AllowPrivateNetworks: true})
	if err != nil {
		fmt.Println(err)
		return
	}

	// The subscriber's receiver: it checks the signature over the raw body
	// and hands what it got to the example. Its URL is known before the
	// endpoint exists, its secret only after, so it starts once it has both.
	type delivery struct {
		webhookID, eventType string
		data                 json.RawMessage
	}
	got := make(chan delivery, 1)
	var verifier signature.Verifier
	receiver := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "unreadable body", http.StatusBadRequest)
			return
		}
		err = verifier.Verify(r.Context(), &signature.Request{Method: r.Method, Header: r.Header, Body: body})
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var envelope struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"` // beside "timestamp", when it was published
		}
		if err := json.Unmarshal(body, &envelope); err != nil {
			http.Error(w, "body is not JSON", http.StatusBadRequest)
			return
		}
		got <- delivery{webhookID: r.Header.Get(signature.HeaderWebhookID), eventType: envelope.Type, data: envelope.Data}
		w.WriteHeader(http.StatusNoContent)
	}))
	endpoint, err := ob.EndpointCreate(ctx, &outbox.EndpointParams{
		URL:        "http://" + receiver.Listener.Addr().String() + "/webhooks",
		EventTypes: []string{"invoice.*"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	verifier = signature.NewStandardWebhooks(signature.Secrets{endpoint.Secret}, nil)
	receiver.Start()
	defer receiver.Close()

	// The application's River client works the outbox's queue.
	workers := river.NewWorkers()
	if err := ob.AddWorkers(workers); err != nil {
		fmt.Println(err)
		return
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:        map[string]river.QueueConfig{ob.Queue(): {MaxWorkers: 2}},
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

	// The invoice's update and the event commit together, or neither does.
	var res *outbox.PublishResult
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE invoices SET paid = true WHERE id = 'inv_1'"); err != nil {
			return err
		}
		res, err = ob.PublishTx(ctx, tx, &outbox.Event{
			Type: "invoice.paid",
			Data: map[string]any{"invoice": "inv_1", "amount": 1200},
		})
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("deliveries:", res.Deliveries)

	// Wait for the delivery, as a test would; an application does not.
	timeout := time.After(20 * time.Second)
	select {
	case d := <-got:
		fmt.Println("received:", d.eventType, string(d.data))
		fmt.Println("webhook-id is the event id:", d.webhookID == res.EventID)
	case <-timeout:
		fmt.Println("not delivered within 20s")
		return
	}
	select {
	case ev := <-finished:
		fmt.Println("job:", ev.Kind)
	case <-timeout:
		fmt.Println("delivery job not finished within 20s")
		return
	}
	deliveries, err := ob.DeliveryList(ctx, &outbox.DeliveryListParams{EventID: res.EventID})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range deliveries {
		fmt.Println("delivery:", d.Status, "attempts:", d.Attempts, "status code:", *d.LastStatusCode)
	}

	// Output:
	// deliveries: 1
	// received: invoice.paid {"amount":1200,"invoice":"inv_1"}
	// webhook-id is the event id: true
	// job: job_completed
	// delivery: succeeded attempts: 1 status code: 204
}

// PublishTx writes in the caller's transaction: when it rolls back, the event
// and its deliveries were never there, and nothing is sent.
func ExampleOutbox_PublishTx_rollback() {
	ctx := context.Background()
	pool, cleanup := testdb.ForExample()
	defer cleanup()
	ob, err := outbox.New(pool, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := ob.EndpointCreate(ctx, &outbox.EndpointParams{URL: "https://hooks.example.com/wharf"}); err != nil {
		fmt.Println(err)
		return
	}

	errOutOfStock := errors.New("out of stock")
	var res *outbox.PublishResult
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err = ob.PublishTx(ctx, tx, &outbox.Event{Type: "order.created", Data: map[string]string{"order": "ord_1"}})
		if err != nil {
			return err
		}
		return errOutOfStock // the order fails after PublishTx: BeginFunc rolls back
	})
	fmt.Println("transaction:", err)
	fmt.Println("deliveries planned:", res.Deliveries)

	deliveries, err := ob.DeliveryList(ctx, &outbox.DeliveryListParams{EventID: res.EventID})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("deliveries stored:", len(deliveries))

	// Output:
	// transaction: out of stock
	// deliveries planned: 1
	// deliveries stored: 0
}
