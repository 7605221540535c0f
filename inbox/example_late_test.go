package inbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/jobs"
	"github.com/wharfhq/wharf/signature"
)

// An event sent again after its dedupe key was pruned (here: a prune run
// as if four days had passed) is a late arrival: stored as a new message
// that names the first, and, for a source with LateReconcile, handed to
// the reconcile handler instead of the type's.
func ExampleInbox_HandleReconcile() {
	ctx := context.Background()
	pool, cleanup := testdb.ForExample() // a pool on a database migrated with wharf.Migrate
	defer cleanup()

	ib, err := inbox.New(pool, &inbox.Config{Sources: []inbox.Source{{
		Name:         "payments",
		Verifier:     signature.NewStandardWebhooks(signature.Secrets{testSecret}, nil),
		LateArrivals: inbox.LateReconcile,
	}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ib.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		fmt.Println("applied", msg.EventID)
		return nil
	})
	ib.HandleReconcile("payments", func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		fmt.Println("reconciled", msg.EventID, "first processed:", msg.RedeliveryOf.ProcessedAt != nil)
		return nil
	})

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
	finished, cancel := client.Subscribe(river.EventKindJobCompleted)
	defer cancel()
	if err := client.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = client.Stop(ctx) }()

	receive := func() *inbox.Result {
		var res *inbox.Result
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			res, err = ib.ReceiveTx(ctx, tx, inbox.Incoming{Source: "payments", EventID: "evt_1", Body: []byte(`{}`)})
			return err
		}); err != nil {
			fmt.Println(err)
		}
		return res
	}
	await := func() {
		select {
		case <-finished:
		case <-time.After(20 * time.Second):
			fmt.Println("not processed within 20s")
		}
	}

	first := receive()
	if first == nil {
		return
	}
	await()
	again := receive()
	if again == nil {
		return
	}
	fmt.Println("again within the window, duplicate:", again.Duplicate)

	// The retention job, four days later, prunes the key.
	maint, err := jobs.NewMaintainer(pool, &jobs.Config{Now: func() time.Time { return time.Now().Add(4 * 24 * time.Hour) }})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := maint.Prune(ctx, nil); err != nil {
		fmt.Println(err)
		return
	}
	late := receive()
	if late == nil {
		return
	}
	fmt.Println("after the window, duplicate:", late.Duplicate, "late arrival of the first:", late.RedeliveryOf == first.MessageID)
	await()

	// Output:
	// applied evt_1
	// again within the window, duplicate: true
	// after the window, duplicate: false late arrival of the first: true
	// reconciled evt_1 first processed: true
}
