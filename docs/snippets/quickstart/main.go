package main

import (
	"cmp"
	"context"
	"errors"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/wharfhq/wharf"
	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/signature"
	"github.com/wharfhq/wharf/wharfriver"
)

// PaymentSucceeded is the payments provider's event, as it sends it.
type PaymentSucceeded struct {
	Data struct {
		Account string `json:"account"`
		Amount  int64  `json:"amount"`
	} `json:"data"`
}

func main() {
	// Ctrl-C or SIGTERM cancels ctx: the server stops, then River.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()

	// 1. Migrate: River's tables and Wharf's, plus a week of daily
	//    partitions; then the app's own table (your migrations' job).
	if err := wharf.Migrate(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS balances (
		account text PRIMARY KEY,
		balance bigint NOT NULL
	)`); err != nil {
		return err
	}

	// 2. Describe your senders.
	ib, err := inbox.New(pool, &inbox.Config{
		Sources: []inbox.Source{{
			Name:     "payments",
			Verifier: signature.NewStandardWebhooks(signature.Secrets{os.Getenv("PAYMENTS_SECRET")}, nil),
		}},
	})
	if err != nil {
		return err
	}

	// 3. Write handlers. tx is the transaction that also marks the message
	//    processed and completes its River job: write through it. HandleJSON
	//    decodes each body into the event's type first: a body that does not
	//    fit is dead at once, without retries (and replayable).
	inbox.HandleJSON(ib, "payments", "payment.succeeded", func(ctx context.Context, tx pgx.Tx, msg *inbox.Message, ev *PaymentSucceeded) error {
		if ev.Data.Account == "" {
			return inbox.Permanent(errors.New("payment without an account"))
		}
		// One upsert: an account's first payment creates its row.
		_, err := tx.Exec(ctx, `INSERT INTO balances (account, balance) VALUES ($1, $2)
			ON CONFLICT (account) DO UPDATE SET balance = balances.balance + excluded.balance`,
			ev.Data.Account, ev.Data.Amount)
		return err // non-nil: everything rolls back, River retries with backoff
	})
	ib.Handle("payments", inbox.Wildcard, func(context.Context, pgx.Tx, *inbox.Message) error { return nil })

	// 4. Attach Wharf to your River client in one call: its workers, its
	//    queue and the periodic jobs that keep partitions ahead and prune what
	//    has expired (docs/operations.md, "River configuration").
	riverCfg := &river.Config{FetchCooldown: 10 * time.Millisecond, JobTimeout: 20 * time.Second}
	if err := wharfriver.Configure(riverCfg, &wharfriver.Components{Pool: pool, Inbox: ib}); err != nil {
		return err
	}
	client, err := river.NewClient(riverpgxv5.New(pool), riverCfg)
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}

	// 5. Mount the receiver. Mount it without a method in the pattern so that
	//    every answer, 405 included, is Wharf's JSON.
	mux := http.NewServeMux()
	mux.Handle("/webhooks/{source}", ib.Handler())

	// 6. Serve it with timeouts (the example app's settings): a client sending
	//    its headers or body slowly is cut off instead of holding a handler.
	//    The body is read before any database work, so a slow client never
	//    holds a connection.
	server := &http.Server{
		Addr:              cmp.Or(os.Getenv("ADDR"), ":8080"),
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}

	// 7. Serve until ctx is cancelled (or the address is taken), then let
	//    the requests in flight finish and stop River.
	serveErr := make(chan error, 1)
	go func() { serveErr <- server.ListenAndServe() }()
	select {
	case err = <-serveErr:
	case <-ctx.Done():
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return errors.Join(err, server.Shutdown(stopCtx), client.Stop(stopCtx))
}
