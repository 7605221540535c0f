package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/wharfhq/wharf"
	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/jobs"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/portal"
	"github.com/wharfhq/wharf/signature"
)

// examplePoolSize is the example's connection pool size unless
// DATABASE_URL sets pool_max_conns: the inbox's processing transactions (8,
// half the pool, each holding a connection while it runs), its two receive
// batches and River's own connections, without crowding a small server.
const examplePoolSize = 16

// riverConfig is the River configuration the example runs with.
//
// Jobs of a process killed mid-work stay "running" until River's rescuer
// (run every 30 s by the leader) finds them older than RescueStuckJobsAfter
// and schedules a retry. Inbox handlers are short, so the example trades a
// 20 s JobTimeout for a 30 s rescue window: after a crash, interrupted
// messages are processed again within about a minute. An app whose handlers
// may legitimately run longer must raise JobTimeout, and RescueStuckJobsAfter
// with it, or a slow handler is rescued (and run twice — harmlessly, since
// only one run can commit) while still working. FetchCooldown is lowered
// from River's 100 ms so a queue with many workers is not capped at
// MaxWorkers jobs per 100 ms, and FetchPollInterval from River's 1 s: a job
// inserted moments after another (an ordering wake, a retry) may get no
// insert notification of its own and wait for the next poll.
//
// The inbox runs at most 8 processing transactions at once (its
// MaxProcessing: half of the pool), each holding a connection while it
// runs: more on this 16-connection pool starve the receivers of
// connections (measured: 16 of them tripled the p99 of receiving under
// load). Its 32 workers beyond them wait holding none, and the batch jobs
// among them share transactions; fewer workers would cap processing,
// since River fetches a queue's jobs at most MaxWorkers per FetchCooldown
// (8 workers and a 10 ms cooldown fell behind at 1,000 webhooks/s once
// batch jobs merged). Outbox workers hold a connection only for their
// short statements, not while a request is out.
//
// JobTimeout must also exceed every outbox endpoint's request timeout
// (15 s by default). Wharf's periodic jobs (partition upkeep, retention) run
// on the default queue.
func riverConfig(workers *river.Workers, logger *slog.Logger) *river.Config {
	return &river.Config{
		Queues: map[string]river.QueueConfig{
			inbox.DefaultQueue:  {MaxWorkers: 32},
			outbox.DefaultQueue: {MaxWorkers: 50},
			river.QueueDefault:  {MaxWorkers: 2},
		},
		Workers:              workers,
		FetchCooldown:        10 * time.Millisecond,
		FetchPollInterval:    100 * time.Millisecond,
		JobTimeout:           20 * time.Second,
		RescueStuckJobsAfter: 30 * time.Second,
		Logger:               logger,
	}
}

// run serves the example on ln until ctx is done, then shuts down
// gracefully: the HTTP server stops taking requests, in-flight River jobs
// finish, and the pool closes.
func run(ctx context.Context, cfg config, ln net.Listener, logger *slog.Logger) error {
	poolConfig, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("database url: %w", err)
	}
	if !strings.Contains(cfg.DatabaseURL, "pool_max_conns") {
		// pgx's default, max(4, CPUs), starves River's workers and the
		// receive batches of connections; the URL's pool_max_conns wins.
		poolConfig.MaxConns = examplePoolSize
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if err := migrate(ctx, cfg, pool); err != nil {
		return err
	}
	pooled, err := wharf.Pooled(ctx, pool)
	if err != nil {
		return err
	}
	if err := createTables(ctx, pool); err != nil {
		return err
	}

	mp, metricsHandler, err := newMetrics()
	if err != nil {
		return err
	}
	defer shutdownMetrics(context.WithoutCancel(ctx), mp)

	ob, err := outbox.New(pool, &outbox.Config{
		MeterProvider:        mp,
		RetrySchedule:        cfg.RetrySchedule,
		AllowPrivateNetworks: cfg.AllowPrivate,
		Logger:               logger,
		Now:                  cfg.now,
	})
	if err != nil {
		return err
	}
	ib, err := inbox.New(pool, &inbox.Config{
		Sources: []inbox.Source{
			{Name: "payments", Verifier: signature.NewStandardWebhooks(signature.Secrets{cfg.Secret}, nil)},
			{Name: "stripe", Verifier: signature.NewStripe(signature.Secrets{cfg.StripeSecret}, nil)},
			{Name: "github", Verifier: signature.NewGitHub(signature.Secrets{cfg.GitHubSecret}, nil)},
		},
		Logger:        logger,
		Now:           cfg.now,
		MeterProvider: mp,
	})
	if err != nil {
		return err
	}
	ib.HandleBatch("payments", "payment.succeeded", applyPayments(ob, cfg.PortalKey != nil))
	ib.Handle(inbox.Wildcard, inbox.Wildcard, ignore)

	jobsConfig := cfg.jobsConfig(logger)
	jobsConfig.MeterProvider = mp
	maintainer, err := jobs.NewMaintainer(pool, jobsConfig)
	if err != nil {
		return err
	}
	workers := river.NewWorkers()
	if err := errors.Join(
		ib.AddWorkers(workers),
		ob.AddWorkers(workers),
		maintainer.AddWorkers(workers),
	); err != nil {
		return err
	}
	rc := cfg.tuneRiver(riverConfig(workers, logger))
	rc.PeriodicJobs = slices.Concat(maintainer.PeriodicJobs(), ib.PeriodicJobs(), ob.PeriodicJobs())
	if pooled {
		// Behind PgBouncer in transaction mode LISTEN does not work: poll,
		// often enough that webhooks still go out within tens of
		// milliseconds (River's default interval is a second).
		rc.PollOnly, rc.FetchPollInterval = true, pooledFetchPollInterval
	}
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}

	payouts, err := payoutsHandler(pool, logger, mp)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/webhooks/{source}", ib.Handler())
	mux.HandleFunc("GET /balances/{account}", balanceHandler(pool))
	mux.Handle("POST /payouts", payouts)
	mux.HandleFunc("POST /endpoints", createEndpoint(ob))
	mux.HandleFunc("DELETE /endpoints/{id}", deleteEndpoint(ob))
	mux.Handle("GET /metrics", metricsHandler)
	if cfg.PortalKey != nil {
		// The accounts' own portal and API: each account is a tenant and
		// manages the endpoints that receive its balance.updated events.
		h, err := portal.New(&portal.Config{
			Outbox: ob, Pool: pool, Keys: [][]byte{cfg.PortalKey}, Prefix: "/portal",
			Name: "Wharf example payments", Logger: logger,
		})
		if err != nil {
			return err
		}
		mux.Handle("/portal/", h)
	}
	server := newServer(mux)

	serveErr := make(chan error, 1)
	go func() { serveErr <- server.Serve(ln) }()
	logger.Info("example: listening", "addr", ln.Addr().String())

	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	logger.Info("example: shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	shutdownErr := server.Shutdown(shutdownCtx)
	stopErr := client.Stop(shutdownCtx) // waits for in-flight jobs
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return errors.Join(err, shutdownErr, stopErr)
}

// pooledFetchPollInterval is how often the example's River client looks for
// new jobs when its pool goes through a connection pooler.
const pooledFetchPollInterval = 20 * time.Millisecond

// migrate runs Wharf's migrations on cfg.MigrateURL when set, else on pool.
// Migrations need a direct connection: through a pooler wharf.Migrate
// refuses at once, and the error says which setting to use.
func migrate(ctx context.Context, cfg config, pool *pgxpool.Pool) error {
	if cfg.MigrateURL == "" {
		err := wharf.Migrate(ctx, pool)
		if errors.Is(err, wharf.ErrPooledConnection) {
			return fmt.Errorf("%w (set WHARF_EXAMPLE_MIGRATE_URL to a direct URL for migrations)", err)
		}
		return err
	}
	direct, err := pgxpool.New(ctx, cfg.MigrateURL)
	if err != nil {
		return fmt.Errorf("migrate url: %w", err)
	}
	defer direct.Close()
	return wharf.Migrate(ctx, direct)
}

// createTables creates the example's own table. A real app would manage it
// with its own migrations.
func createTables(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_balances (
		account text PRIMARY KEY,
		balance bigint NOT NULL DEFAULT 0
	)`)
	return err
}

type paymentEvent struct {
	Type string `json:"type"`
	Data struct {
		Account string       `json:"account"`
		Amount  *json.Number `json:"amount"`
	} `json:"data"`
}

// applyPayments adds payments to their accounts' balances inside the inbox
// transaction, so each addition commits exactly once, and publishes a
// balance.updated for each payment in the same transaction: no balance
// change without its event, and no event without its change. It is an
// inbox.BatchHandler: a run of payments of one processing batch takes one
// upsert (the payments of an account summed, accounts in order, so that the
// runs of concurrent batches lock rows in one order) and one PublishManyTx,
// and each event still carries the balance right after its own payment. A
// payment that cannot be applied fails the run, which the inbox then runs
// again payment by payment: only the bad one fails.
func applyPayments(ob *outbox.Outbox, perAccount bool) inbox.BatchHandler {
	return func(ctx context.Context, tx pgx.Tx, msgs []*inbox.Message) error {
		type payment struct {
			account string
			amount  int64
		}
		payments := make([]payment, len(msgs))
		totals := map[string]int64{}
		for i, msg := range msgs {
			var ev paymentEvent
			if err := json.Unmarshal(msg.Body, &ev); err != nil {
				return inbox.Permanent(fmt.Errorf("decode payment: %w", err))
			}
			if ev.Data.Account == "" || ev.Data.Amount == nil {
				return inbox.Permanent(errors.New("payment needs data.account and data.amount"))
			}
			amount, err := ev.Data.Amount.Int64()
			if err != nil {
				return inbox.Permanent(fmt.Errorf("amount %q is not an integer", ev.Data.Amount.String()))
			}
			payments[i] = payment{ev.Data.Account, amount}
			sum := totals[ev.Data.Account] + amount
			if (amount > 0 && sum < totals[ev.Data.Account]) || (amount < 0 && sum > totals[ev.Data.Account]) {
				// Beyond int64 in Go: one payment at a time, Postgres
				// refuses the one that overflows the balance.
				return fmt.Errorf("payments to %s overflow a sum", ev.Data.Account)
			}
			totals[ev.Data.Account] = sum
		}
		accounts := slices.Sorted(maps.Keys(totals))
		sums := make([]int64, len(accounts))
		for i, a := range accounts {
			sums[i] = totals[a]
		}
		rows, err := tx.Query(ctx, `INSERT INTO example_balances (account, balance)
			SELECT account, amount FROM unnest($1::text[], $2::bigint[]) AS p(account, amount) ORDER BY account
			ON CONFLICT (account) DO UPDATE SET balance = example_balances.balance + excluded.balance
			RETURNING account, balance`, accounts, sums)
		if err != nil {
			return err
		}
		balances := map[string]int64{}
		for rows.Next() {
			var account string
			var balance int64
			if err := rows.Scan(&account, &balance); err != nil {
				rows.Close()
				return err
			}
			balances[account] = balance
		}
		if err := rows.Err(); err != nil {
			return err
		}
		// Each payment's balance: its account's balance now, less the
		// payments to it that come after.
		events := make([]*outbox.Event, len(payments))
		later := map[string]int64{}
		for i := len(payments) - 1; i >= 0; i-- {
			p := payments[i]
			events[i] = &outbox.Event{
				Type: "balance.updated",
				Data: map[string]any{"account": p.account, "balance": balances[p.account] - later[p.account]},
			}
			if perAccount {
				events[i].Tenant = p.account
			}
			later[p.account] += p.amount
		}
		_, err = ob.PublishManyTx(ctx, tx, events)
		return err
	}
}

// ignore accepts events the example has no use for.
func ignore(context.Context, pgx.Tx, *inbox.Message) error { return nil }

// createEndpoint serves POST /endpoints: {"url":…, "event_types":[…]}
// registers a webhook endpoint and answers 201 {"id":…, "secret":"whsec_…"}.
func createEndpoint(ob *outbox.Outbox) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			URL         string   `json:"url"`
			EventTypes  []string `json:"event_types"`
			Description string   `json:"description"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body must be JSON: " + err.Error()})
			return
		}
		ep, err := ob.EndpointCreate(r.Context(), &outbox.EndpointParams{
			URL: req.URL, EventTypes: req.EventTypes, Description: req.Description,
		})
		switch {
		case errors.Is(err, outbox.ErrInvalidEndpoint):
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		case err != nil:
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "database unavailable"})
		default:
			writeJSON(w, http.StatusCreated, map[string]string{"id": ep.ID.String(), "secret": ep.Secret})
		}
	}
}

// deleteEndpoint serves DELETE /endpoints/{id}: 204, or 404.
func deleteEndpoint(ob *outbox.Outbox) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := uuid.Parse(r.PathValue("id"))
		if err != nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such endpoint"})
			return
		}
		switch err := ob.EndpointDelete(r.Context(), id); {
		case errors.Is(err, outbox.ErrNotFound):
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such endpoint"})
		case err != nil:
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "database unavailable"})
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}
}

func balanceHandler(pool *pgxpool.Pool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		account := r.PathValue("account")
		var balance int64
		err := pool.QueryRow(r.Context(), "SELECT balance FROM example_balances WHERE account = $1", account).Scan(&balance)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "database unavailable"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"account": account, "balance": balance})
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
