package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/idempotency"
	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/partition"
	"github.com/wharfhq/wharf/internal/testclock"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/jobs"
	"github.com/wharfhq/wharf/outbox"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type testBundle struct {
	pool   *pgxpool.Pool
	clock  *testclock.Clock
	inbox  *inbox.Inbox
	outbox *outbox.Outbox
	maint  *jobs.Maintainer
	events <-chan *river.Event
	// pollOnly runs River without LISTEN, as behind PgBouncer.
	pollOnly bool
}

func setup(t *testing.T, cfg *jobs.Config) *testBundle {
	t.Helper()
	return setupOn(t, testdb.New(t), cfg)
}

// setupOn is setup on a given pool.
func setupOn(t *testing.T, pool *pgxpool.Pool, cfg *jobs.Config) *testBundle {
	t.Helper()
	clk := testclock.New(time.Now())
	if cfg == nil {
		cfg = &jobs.Config{}
	}
	cfg.Now, cfg.Logger = clk.Now, quiet
	maint, err := jobs.NewMaintainer(pool, cfg)
	require.NoError(t, err)
	ib, err := inbox.New(pool, &inbox.Config{Now: clk.Now, Logger: quiet})
	require.NoError(t, err)
	// A failed delivery retries an hour (of the simulated clock) later:
	// not during the test.
	ob, err := outbox.New(pool, &outbox.Config{
		Now: clk.Now, Logger: quiet, AllowPrivateNetworks: true,
		RetrySchedule: []time.Duration{0, time.Hour}, RetryJitter: -1,
	})
	require.NoError(t, err)
	return &testBundle{pool: pool, clock: clk, inbox: ib, outbox: ob, maint: maint}
}

// startWorkers works the inbox queue; failed jobs retry only after an hour
// of real time, i.e. not during the test unless replayed.
func (b *testBundle) startWorkers(t *testing.T) {
	t.Helper()
	workers := river.NewWorkers()
	require.NoError(t, b.inbox.AddWorkers(workers))
	require.NoError(t, b.outbox.AddWorkers(workers))
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{
		Queues:            map[string]river.QueueConfig{b.inbox.Queue(): {MaxWorkers: 4}, b.outbox.Queue(): {MaxWorkers: 4}},
		Workers:           workers,
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		RetryPolicy:       slowRetry{},
		PollOnly:          b.pollOnly,
		Logger:            quiet,
		TestOnly:          true,
	})
	require.NoError(t, err)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		cancel()
		require.NoError(t, client.Stop(context.Background()))
	})
	b.events = events
}

type slowRetry struct{}

func (slowRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(time.Hour) }

func (b *testBundle) receive(t *testing.T, source, eventID string) *inbox.Result {
	t.Helper()
	ctx := context.Background()
	var res *inbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		res, err = b.inbox.ReceiveTx(ctx, tx, inbox.Incoming{Source: source, EventID: eventID, EventType: "t", Body: []byte(`{}`)})
		return err
	}))
	return res
}

func (b *testBundle) awaitJobs(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-b.events:
		case <-time.After(20 * time.Second):
			t.Fatalf("job did not finish within 20s")
		}
	}
}

// awaitStatus waits until every message of source has status: processed
// by a job each, or together by a job that adopts the others' jobs (which
// River reports no event for).
func (b *testBundle) awaitStatus(t *testing.T, source, status string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := b.pool.QueryRow(context.Background(),
			"SELECT count(*) FROM wharf_inbox_messages WHERE source = $1 AND status <> $2", source, status).Scan(&n)
		return err == nil && n == 0
	}, 20*time.Second, 10*time.Millisecond, "messages of %s never all %s", source, status)
}

func (b *testBundle) count(t *testing.T, query string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), query).Scan(&n))
	return n
}

func (b *testBundle) partitionDays(t *testing.T, table string) []time.Time {
	t.Helper()
	parts, err := partition.List(context.Background(), b.pool, table)
	require.NoError(t, err)
	days := make([]time.Time, 0, len(parts))
	for _, p := range parts {
		days = append(days, p.Day)
	}
	return days
}

func days(first, last time.Time) []time.Time {
	var out []time.Time
	for d := first; !d.After(last); d = d.AddDate(0, 0, 1) {
		out = append(out, d)
	}
	return out
}

// TestHundredDays simulates 100 days of traffic with an injected clock:
// every day three messages arrive and are processed, upkeep and prune run.
// Partitions must exist ahead, expired ones go, row counts follow the
// retention settings — except for a message kept unfinished, whose day
// survives until it is processed, and a dead letter, kept for its own
// retention.
func TestHundredDays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const perDay = 3
	b := setup(t, &jobs.Config{DeadLetterRetention: 40 * 24 * time.Hour})
	var released atomic.Bool
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(_ context.Context, _ pgx.Tx, msg *inbox.Message) error {
		switch msg.Source {
		case "stuck":
			if !released.Load() {
				return errors.New("not yet")
			}
		case "doomed":
			return inbox.Permanent(errors.New("bad payload"))
		}
		return nil
	})
	b.startWorkers(t)

	start := partition.Day(time.Now())
	var stuckID, deadDay time.Time
	var stuck *inbox.Result
	for d := range 100 {
		today := start.AddDate(0, 0, d)
		b.clock.Set(today.Add(12 * time.Hour))
		_, err := b.maint.Upkeep(ctx)
		require.NoError(t, err)
		for i := range perDay {
			b.receive(t, "s", today.Format("20060102")+"-"+string(rune('a'+i)))
		}
		// Processed: by a job each, or together by the first job of the
		// day's (which adopts the others' jobs, with no River event).
		b.awaitStatus(t, "s", "processed")
		switch d {
		case 5:
			stuck = b.receive(t, "stuck", "stuck-1")
			stuckID = today
			b.awaitStatus(t, "stuck", "failed")
		case 10:
			b.receive(t, "doomed", "doomed-1")
			deadDay = today
			b.awaitStatus(t, "doomed", "dead")
		}
		res, err := b.maint.Prune(ctx, nil)
		require.NoError(t, err)

		// Partitions: the last 31 days (30 of retention plus today's), the
		// days still holding work, and PartitionDaysAhead (7) ahead.
		first := start.AddDate(0, 0, -1) // Migrate's "yesterday"
		if oldest := today.AddDate(0, 0, -30); oldest.After(first) {
			first = oldest
		}
		want := days(first, today.AddDate(0, 0, 7))
		kept := 0
		if d >= 36 { // the stuck day is expired from day 36 on
			want = append([]time.Time{stuckID}, want...)
			kept++
			require.Contains(t, res.Deferred, jobs.DeferredPartition{Name: partition.Name("wharf_inbox_messages", stuckID), Unfinished: 1})
		}
		if d >= 41 && d < 50 { // the dead letter's day: expired, dead for under 40 days
			want = append([]time.Time{stuckID, deadDay}, want[1:]...)
			kept++
		}
		require.Equal(t, want, b.partitionDays(t, "wharf_inbox_messages"), "day %d", d)
		require.Len(t, res.Deferred, kept, "day %d: %+v", d, res.Deferred)

		// Rows: three per retained day, plus the stuck and the dead ones,
		// plus the finished rows that share a kept day with them.
		retainedDays := min(d, 30) + 1 + kept
		extra := 0
		if d >= 5 {
			extra++
		}
		if d >= 10 && d < 50 {
			extra++
		}
		require.Equal(t, perDay*retainedDays+extra, b.count(t, "SELECT count(*) FROM wharf_inbox_messages"), "day %d", d)

		// Keys: those received within the last 72 hours (today and the
		// three days before), plus the unfinished message's and the dead
		// letter's whatever their age: a dead letter can be replayed for
		// as long as it is kept, so its key guards it as long.
		keys := perDay * (min(d, 3) + 1)
		if d >= 5 {
			keys++
		}
		if d >= 10 && d < 50 {
			keys++
		}
		require.Equal(t, keys, b.count(t, "SELECT count(*) FROM wharf_inbox_keys"), "day %d", d)
	}

	// The stuck message survived 94 days past its day's retention; it is
	// still there to be processed.
	released.Store(true)
	require.NoError(t, b.inbox.Replay(ctx, stuck.MessageID))
	b.awaitStatus(t, "stuck", "processed")
	msg, err := b.inbox.Get(ctx, stuck.MessageID)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusProcessed, msg.Status)

	// Now finished, its day goes at the next prune.
	res, err := b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.Contains(t, res.Dropped, partition.Name("wharf_inbox_messages", stuckID))
	require.Empty(t, res.Deferred)
}

// TestConcurrentPrunes runs two prunes (and two upkeeps) at once: both
// succeed and the end state is the one a single run leaves.
func TestConcurrentPrunes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(context.Context, pgx.Tx, *inbox.Message) error { return nil })
	b.startWorkers(t)

	// Forty days of one processed message each, created at their day.
	start := partition.Day(time.Now())
	for d := range 40 {
		b.clock.Set(start.AddDate(0, 0, d).Add(time.Hour))
		b.receive(t, "s", start.AddDate(0, 0, d).Format("20060102"))
		b.awaitJobs(t, 1)
	}
	second, err := jobs.NewMaintainer(b.pool, &jobs.Config{Now: b.clock.Now, Logger: quiet})
	require.NoError(t, err)

	var wg sync.WaitGroup
	results := make([]*jobs.PruneResult, 2)
	errs := make([]error, 4)
	for i, m := range []*jobs.Maintainer{b.maint, second} {
		wg.Add(2)
		go func() { defer wg.Done(); results[i], errs[i] = m.Prune(ctx, nil) }()
		go func() { defer wg.Done(); _, errs[2+i] = m.Upkeep(ctx) }()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	// Every expired day was dropped exactly once between the two runs.
	dropped := append(results[0].Dropped, results[1].Dropped...)
	// Days -1 … 8 are past 30 days of retention on day 39: the inbox had a
	// partition for each, the outbox only those Migrate made (-1 … 7).
	var inboxDropped int
	for _, name := range dropped {
		if strings.HasPrefix(name, "wharf_inbox_messages_p") {
			inboxDropped++
		}
	}
	require.Equal(t, 10, inboxDropped, "%v", dropped)
	require.Len(t, dropped, 10+9, "%v", dropped)
	seen := map[string]bool{}
	for _, name := range dropped {
		require.False(t, seen[name], "%s dropped twice", name)
		seen[name] = true
	}
	today := start.AddDate(0, 0, 39)
	require.Equal(t, days(today.AddDate(0, 0, -30), today.AddDate(0, 0, 7)), b.partitionDays(t, "wharf_inbox_messages"))
	require.Equal(t, 31, b.count(t, "SELECT count(*) FROM wharf_inbox_messages"))

	// A third run finds nothing left to do.
	res, err := b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, res.Dropped)
	require.Zero(t, res.DedupeKeysDeleted)
}

// TestDedupeWindow: a redelivery inside the window is a duplicate; after
// the keys are pruned the same event id is accepted as a new event — the
// documented trade-off of a bounded window.
func TestDedupeWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil) // DedupeWindow 72h
	t0 := time.Now()
	b.clock.Set(t0)
	first := b.receive(t, "s", "evt_1")
	require.False(t, first.Duplicate)

	b.clock.Set(t0.Add(71 * time.Hour))
	_, err := b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.True(t, b.receive(t, "s", "evt_1").Duplicate, "inside the window")

	// The message is still unfinished (no worker runs here): its key is
	// kept even past the window.
	b.clock.Set(t0.Add(73 * time.Hour))
	res, err := b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.Zero(t, res.DedupeKeysDeleted)
	require.True(t, b.receive(t, "s", "evt_1").Duplicate, "unfinished message keeps its key")

	// Processed, the key ages out, and a late redelivery is new.
	_, err = b.pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = 'processed'")
	require.NoError(t, err)
	dry, err := b.maint.Prune(ctx, &jobs.PruneOpts{DryRun: true})
	require.NoError(t, err)
	require.EqualValues(t, 1, dry.DedupeKeysDeleted)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM wharf_inbox_keys"), "dry run deletes nothing")
	res, err = b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.DedupeKeysDeleted)
	late := b.receive(t, "s", "evt_1")
	require.False(t, late.Duplicate, "after the window")
	require.NotEqual(t, first.MessageID, late.MessageID)
}

// TestDeadLetterKeepsItsKey: a dead message can be replayed until its day
// is dropped, so its dedupe key outlives the window with it. Without the
// key, a resend after the window would be accepted as a new event, and
// replaying the dead letter would apply the event a second time.
func TestDeadLetterKeepsItsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil) // DedupeWindow 72h, DeadLetterRetention 30 days
	t0 := time.Now()
	b.clock.Set(t0)
	first := b.receive(t, "s", "evt_dead")
	_, err := b.pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = 'dead'")
	require.NoError(t, err)

	b.clock.Set(t0.Add(10 * 24 * time.Hour))
	dry, err := b.maint.Prune(ctx, &jobs.PruneOpts{DryRun: true})
	require.NoError(t, err)
	require.Zero(t, dry.DedupeKeysDeleted, "dry run counts the dead letter's key as expired")
	res, err := b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.Zero(t, res.DedupeKeysDeleted)
	resend := b.receive(t, "s", "evt_dead")
	require.True(t, resend.Duplicate, "a resend of a dead event after the window")
	require.Equal(t, first.MessageID, resend.MessageID)

	// Replayed and processed, the message is finished: its key ages out.
	require.NoError(t, b.inbox.Replay(ctx, first.MessageID))
	_, err = b.pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = 'processed'")
	require.NoError(t, err)
	res, err = b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.DedupeKeysDeleted)
}

func TestKeyPruningInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, &jobs.Config{BatchSize: 7})
	t0 := time.Now()
	b.clock.Set(t0)
	for i := range 30 {
		b.receive(t, "s", "evt_"+string(rune('A'+i)))
	}
	_, err := b.pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = 'processed'")
	require.NoError(t, err)
	b.clock.Set(t0.Add(80 * time.Hour))
	res, err := b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, 30, res.DedupeKeysDeleted)
	require.Zero(t, b.count(t, "SELECT count(*) FROM wharf_inbox_keys"))
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	require.NoError(t, (*jobs.Config)(nil).Validate())
	for _, tt := range []struct {
		cfg  jobs.Config
		want string
	}{
		{jobs.Config{DedupeWindow: time.Hour}, "DedupeWindow 1h0m0s is outside"},
		{jobs.Config{InboxRetention: 100 * 24 * time.Hour}, "InboxRetention 2400h0m0s is outside"},
		{jobs.Config{SourceRetryWindows: map[string]time.Duration{"stripe": 96 * time.Hour}}, `shorter than source "stripe"'s retry window 96h0m0s`},
		{jobs.Config{ScrubAfter: 40 * 24 * time.Hour}, "ScrubAfter"},
		{jobs.Config{BatchSize: -1}, "BatchSize"},
		{jobs.Config{Interval: time.Second}, "Interval"},
		{jobs.Config{DedupeWindow: 96 * time.Hour, ErasedKeyRetention: 80 * time.Hour}, "ErasedKeyRetention 80h0m0s is shorter than DedupeWindow 96h0m0s"},
		{jobs.Config{ErasedKeyRetention: 11 * 365 * 24 * time.Hour}, "ErasedKeyRetention 96360h0m0s is over 87600h0m0s"},
	} {
		require.ErrorContains(t, tt.cfg.Validate(), tt.want)
	}
	ok := jobs.Config{DedupeWindow: 96 * time.Hour, SourceRetryWindows: map[string]time.Duration{"stripe": 72 * time.Hour}, ErasedKeyRetention: 5 * 365 * 24 * time.Hour}
	require.NoError(t, ok.Validate())
}

// TestPrunesIdempotencyKeys: keys expire by the database's clock. The
// maintainer's own clock, here 90 s ahead, decides nothing: a key the
// database says expires in a minute is neither deleted nor counted.
func TestPrunesIdempotencyKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	mw, err := idempotency.New(b.pool, func(*http.Request) string { return "p" }, nil)
	require.NoError(t, err)
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }))
	for _, key := range []string{"k1", "k2", "k3"} {
		req := httptest.NewRequest(http.MethodPost, "/payouts", strings.NewReader(`{}`))
		req.Header.Set(idempotency.HeaderKey, key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusCreated, rec.Code)
	}
	expireIn := func(d time.Duration) {
		t.Helper()
		_, err := b.pool.Exec(ctx, "UPDATE wharf_idempotency_keys SET expires_at = now() + $1::interval", d)
		require.NoError(t, err)
	}

	expireIn(time.Minute)
	b.clock.Set(time.Now().Add(90 * time.Second))
	dry, err := b.maint.Prune(ctx, &jobs.PruneOpts{DryRun: true})
	require.NoError(t, err)
	require.Zero(t, dry.IdempotencyKeysDeleted)
	res, err := b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.Zero(t, res.IdempotencyKeysDeleted)
	require.Equal(t, 3, b.count(t, "SELECT count(*) FROM wharf_idempotency_keys"))

	expireIn(-time.Second)
	dry, err = b.maint.Prune(ctx, &jobs.PruneOpts{DryRun: true})
	require.NoError(t, err)
	require.EqualValues(t, 3, dry.IdempotencyKeysDeleted)
	res, err = b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, 3, res.IdempotencyKeysDeleted)
	require.Zero(t, b.count(t, "SELECT count(*) FROM wharf_idempotency_keys"))
}

// TestOutboxRetention: forty days of one delivered event a day. Event
// partitions past 30 days go, with their finished deliveries; attempt logs
// stay (90 days); a day whose delivery is still retrying stays.
func TestOutboxRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(ok.Close)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }))
	t.Cleanup(failing.Close)
	_, err := b.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: ok.URL, EventTypes: []string{"a.*"}})
	require.NoError(t, err)
	_, err = b.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: failing.URL, EventTypes: []string{"b.*"}})
	require.NoError(t, err)
	b.startWorkers(t)

	publish := func(eventType string) {
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := b.outbox.PublishTx(ctx, tx, &outbox.Event{Type: eventType, Data: map[string]any{"n": 1}})
			return err
		}))
	}
	start := partition.Day(time.Now())
	var retryingDay time.Time
	for d := range 40 {
		today := start.AddDate(0, 0, d)
		b.clock.Set(today.Add(12 * time.Hour))
		_, err := b.maint.Upkeep(ctx)
		require.NoError(t, err)
		publish("a.created")
		b.awaitJobs(t, 1)
		if d == 3 {
			retryingDay = today
			publish("b.created") // fails, and retries only an hour later
			b.awaitJobs(t, 1)
		}
		_, err = b.maint.Prune(ctx, nil)
		require.NoError(t, err)
	}
	today := start.AddDate(0, 0, 39)
	want := append([]time.Time{retryingDay}, days(today.AddDate(0, 0, -30), today.AddDate(0, 0, 7))...)
	require.Equal(t, want, b.partitionDays(t, "wharf_outbox_events"))
	require.Equal(t, days(start.AddDate(0, 0, -1), today.AddDate(0, 0, 7)), b.partitionDays(t, "wharf_outbox_attempts"))
	// 31 retained days of one event each, plus the retrying day's two.
	require.Equal(t, 31+2, b.count(t, "SELECT count(*) FROM wharf_outbox_events"))
	// Deliveries of expired events went, but the retrying one and the
	// deliveries of retained days.
	require.Equal(t, 31+1, b.count(t, "SELECT count(*) FROM wharf_outbox_deliveries"))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM wharf_outbox_deliveries WHERE status = 'retrying'"))
	require.Equal(t, 41, b.count(t, "SELECT count(*) FROM wharf_outbox_attempts"))
	reports, err := b.maint.Report(ctx, true)
	require.NoError(t, err)
	for _, r := range reports {
		if r.Table == "wharf_outbox_events" {
			require.NotNil(t, r.OldestUnfinished)
			require.Equal(t, retryingDay, partition.Day(*r.OldestUnfinished))
		}
	}
}

// TestScrubAndForget: ScrubAfter erases bodies of finished messages ahead
// of row retention; Forget erases one event on request and keeps its key.
func TestScrubAndForget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, &jobs.Config{ScrubAfter: 7 * 24 * time.Hour})
	t0 := time.Now()
	b.clock.Set(t0)
	processed := b.receive(t, "s", "evt_done")
	failing := b.receive(t, "s", "evt_failing")
	_, err := b.pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = 'processed' WHERE id = $1", processed.MessageID)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = 'failed' WHERE id = $1", failing.MessageID)
	require.NoError(t, err)

	b.clock.Set(t0.Add(8 * 24 * time.Hour))
	res, err := b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.MessagesScrubbed)
	msg, err := b.inbox.Get(ctx, processed.MessageID)
	require.NoError(t, err)
	require.Empty(t, msg.Body)
	require.Empty(t, msg.Header)
	require.NotNil(t, msg.ScrubbedAt)
	require.Equal(t, "evt_done", msg.EventID, "metadata stays")
	msg, err = b.inbox.Get(ctx, failing.MessageID)
	require.NoError(t, err)
	require.Equal(t, []byte(`{}`), msg.Body, "a failed message keeps its body for replay")

	// Forget: erased, marked dead (it can no longer be processed), and a
	// redelivery is still a duplicate.
	n, err := b.inbox.Forget(ctx, "s", "evt_failing")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	msg, err = b.inbox.Get(ctx, failing.MessageID)
	require.NoError(t, err)
	require.Empty(t, msg.Body)
	require.Equal(t, inbox.StatusDead, msg.Status)
	require.True(t, b.receive(t, "s", "evt_failing").Duplicate)
	_, err = b.inbox.Forget(ctx, "s", "evt_never")
	require.ErrorIs(t, err, inbox.ErrNotFound)
}

// TestPeriodicJobsRunOnStart: registered in a River client, the three jobs
// run when the leader starts and record what they did.
func TestPeriodicJobsRunOnStart(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	cfg := &jobs.Config{Logger: quiet, PartitionDaysAhead: 12}
	outputs := runPeriodicJobs(t, pool, cfg, nil)
	// Migrate made 7 days ahead; upkeep with 12 created 5 more per table.
	require.Contains(t, outputs["wharf_partition_upkeep"], partition.Name("wharf_inbox_messages", time.Now().AddDate(0, 0, 12)))
	var pruned jobs.PruneResult
	require.NoError(t, json.Unmarshal([]byte(outputs["wharf_prune"]), &pruned))
	require.Equal(t, jobs.PruneResult{Dropped: []string{}, Deferred: []jobs.DeferredPartition{}}, pruned)
	var rolled jobs.RollupResult
	require.NoError(t, json.Unmarshal([]byte(outputs["wharf_rollup"]), &rolled))
	require.Equal(t, jobs.RollupKept, rolled.Inbox.Until.Sub(rolled.Inbox.From), "a first rollup counts RollupKept of hours")
	require.Equal(t, jobs.RollupKept, rolled.Attempts.Until.Sub(rolled.Attempts.From), "a first rollup counts RollupKept of hours")
}

// runPeriodicJobs starts a River client with the periodic jobs of cfg
// (edit adjusts its config: nil for none) and returns, by kind, the output
// of the jobs' first runs, which happen when the client becomes leader.
func runPeriodicJobs(t *testing.T, pool *pgxpool.Pool, cfg *jobs.Config, edit func(*river.Config)) map[string]string {
	t.Helper()
	ctx := context.Background()
	maintainer, err := jobs.NewMaintainer(pool, cfg)
	require.NoError(t, err)
	workers := river.NewWorkers()
	require.NoError(t, maintainer.AddWorkers(workers))
	riverCfg := &river.Config{
		Queues:            map[string]river.QueueConfig{maintainer.Queue(): {MaxWorkers: 2}},
		Workers:           workers,
		PeriodicJobs:      maintainer.PeriodicJobs(),
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            quiet,
		TestOnly:          true,
	}
	if edit != nil {
		edit(riverCfg)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), riverCfg)
	require.NoError(t, err)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer cancel()
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, client.Stop(ctx)) })

	outputs := map[string]string{}
	timeout := time.After(30 * time.Second)
	for len(outputs) < len(maintainer.PeriodicJobs()) {
		select {
		case ev := <-events:
			require.Equal(t, river.EventKindJobCompleted, ev.Kind, "job %s failed: %v", ev.Job.Kind, ev.Job.Errors)
			outputs[ev.Job.Kind] = string(ev.Job.Output())
		case <-timeout:
			t.Fatalf("periodic jobs did not run on start: %v", outputs)
		}
	}
	return outputs
}

// TestScrubOutboxEvents: a fully delivered event's payload is scrubbed
// after ScrubAfter, and its delivery can no longer be replayed (there is
// nothing left to send); an event with a dead delivery keeps its payload.
func TestScrubOutboxEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, &jobs.Config{ScrubAfter: 7 * 24 * time.Hour})
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(ok.Close)
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusGone) }))
	t.Cleanup(gone.Close)
	okEndpoint, err := b.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: ok.URL, EventTypes: []string{"a.*"}})
	require.NoError(t, err)
	_, err = b.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: gone.URL, EventTypes: []string{"b.*"}})
	require.NoError(t, err)
	b.startWorkers(t)
	t0 := time.Now()
	b.clock.Set(t0)
	for _, typ := range []string{"a.created", "b.created"} {
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := b.outbox.PublishTx(ctx, tx, &outbox.Event{Type: typ, Data: map[string]any{}})
			return err
		}))
		b.awaitJobs(t, 1)
	}

	b.clock.Set(t0.Add(8 * 24 * time.Hour))
	res, err := b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.EventsScrubbed, "the event with a dead (410) delivery keeps its payload")

	deliveries, err := b.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{EndpointID: &okEndpoint.ID})
	require.NoError(t, err)
	require.Len(t, deliveries, 1)
	require.ErrorIs(t, b.outbox.DeliveryReplay(ctx, deliveries[0].ID), outbox.ErrEventGone)
}

// TestPruneOnOneConnection: a prune needs a single pooled connection, so it
// cannot starve against replays holding the others, and it drops a
// partition left detached by an interrupted run.
func TestPruneOnOneConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewWithMaxConns(t, 1)
	clk := testclock.New(time.Now())
	maint, err := jobs.NewMaintainer(pool, &jobs.Config{Now: clk.Now, Logger: quiet})
	require.NoError(t, err)

	// Interrupted between DETACH and DROP: yesterday's partition (made by
	// Migrate) is detached but still there.
	yesterday := partition.Name("wharf_inbox_messages", time.Now().AddDate(0, 0, -1))
	require.NoError(t, partition.Detach(ctx, pool, "wharf_inbox_messages", yesterday))

	clk.Set(time.Now().AddDate(0, 0, 40))
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.Contains(t, res.Dropped, yesterday)
	var exists bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", yesterday).Scan(&exists))
	require.False(t, exists)
}

// TestPrunedKeysBecomePastKeys: a pruned key of a stored message moves to
// the past keys, which let a late arrival of its event find the message
// (inbox.Message.RedeliveryOf), until the message's day is past
// InboxRetention; a key of an ignored or erased event leaves none.
func TestPrunedKeysBecomePastKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil) // DedupeWindow 72h, InboxRetention 30 days
	t0 := time.Now()
	b.clock.Set(t0)
	kept := b.receive(t, "s", "evt_kept")
	b.receive(t, "s", "evt_erased")
	_, err := b.pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = 'processed', processed_at = now()")
	require.NoError(t, err)
	_, err = b.inbox.Forget(ctx, "s", "evt_erased")
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, "INSERT INTO wharf_inbox_keys (source, event_id, payload_hash, message_id, received_at, ignored) VALUES ('s', 'evt_ignored', '', gen_random_uuid(), $1, true)", t0)
	require.NoError(t, err)

	b.clock.Set(t0.Add(80 * time.Hour))
	res, err := b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, 2, res.DedupeKeysDeleted, "the kept and the ignored event's; the tombstone stays")
	require.Zero(t, res.PastKeysDeleted)
	var id uuid.UUID
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT message_id FROM wharf_inbox_past_keys").Scan(&id))
	require.Equal(t, kept.MessageID, id, "only the stored message's key")
	late := b.receive(t, "s", "evt_kept")
	require.Equal(t, kept.MessageID, late.RedeliveryOf)

	b.clock.Set(t0.Add(jobs.DefaultInboxRetention + 24*time.Hour))
	dry, err := b.maint.Prune(ctx, &jobs.PruneOpts{DryRun: true})
	require.NoError(t, err)
	require.EqualValues(t, 1, dry.PastKeysDeleted)
	res, err = b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.PastKeysDeleted)
	require.Zero(t, b.count(t, "SELECT count(*) FROM wharf_inbox_past_keys WHERE message_id = '"+kept.MessageID.String()+"'"))
}
