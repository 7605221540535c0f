package inbox_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/telemetrytest"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/jobs"
	"github.com/wharfhq/wharf/signature"
)

// lateBundle is an inbox with three sources, one per LatePolicy ("proc",
// "skip", "recon"), whose handlers record each message they see.
type lateBundle struct {
	*testBundle
	metrics *telemetrytest.Metrics
	maint   *jobs.Maintainer

	mu   sync.Mutex
	seen map[string][]*inbox.Message // handler ("type" or "reconcile") → messages
}

func setupLate(t *testing.T) *lateBundle {
	t.Helper()
	return setupLateOn(t, nil)
}

// setupLateOn is setupLate on pool (nil: a fresh test database).
func setupLateOn(t *testing.T, pool *pgxpool.Pool) *lateBundle {
	t.Helper()
	metrics := telemetrytest.NewMetrics(t)
	v := signature.NewStandardWebhooks(signature.Secrets{testSecret}, nil)
	b := &lateBundle{metrics: metrics, seen: map[string][]*inbox.Message{}}
	b.testBundle = setup(t, &setupOpts{pool: pool, cfg: &inbox.Config{MeterProvider: metrics.Provider, Sources: []inbox.Source{
		{Name: "proc", Verifier: v},
		{Name: "skip", Verifier: v, LateArrivals: inbox.LateSkip},
		{Name: "recon", Verifier: v, LateArrivals: inbox.LateReconcile},
	}}})
	createEffects(t, b.pool)
	record := func(handler string) inbox.Handler {
		return func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
			b.mu.Lock()
			b.seen[handler] = append(b.seen[handler], msg)
			b.mu.Unlock()
			_, err := tx.Exec(ctx, "INSERT INTO effects (event_id) VALUES ($1)", handler+":"+msg.Source+":"+msg.EventID)
			return err
		}
	}
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, record("type"))
	b.inbox.HandleReconcile("recon", record("reconcile"))
	var err error
	b.maint, err = jobs.NewMaintainer(b.pool, &jobs.Config{Now: b.clock.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	return b
}

// pruneKeys moves the clock past the dedupe window and runs the prune,
// which deletes every key received so far.
func (b *lateBundle) pruneKeys(t *testing.T, want int64) {
	t.Helper()
	b.clock.Advance(jobs.DefaultDedupeWindow + time.Hour)
	res, err := b.maint.Prune(context.Background(), nil)
	require.NoError(t, err)
	require.Equal(t, want, res.DedupeKeysDeleted)
}

func (b *lateBundle) handled(handler string) []*inbox.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*inbox.Message(nil), b.seen[handler]...)
}

// messagesOf returns the ids of the messages of an event, oldest first.
func (b *lateBundle) messagesOf(t *testing.T, source, eventID string) []uuid.UUID {
	t.Helper()
	rows, err := b.pool.Query(context.Background(),
		"SELECT id FROM wharf_inbox_messages WHERE source = $1 AND event_id = $2 ORDER BY received_at, id", source, eventID)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	return ids
}

// TestLateArrivals: an event received again after its dedupe key was
// pruned, while its first message is retained, is stored as a new message
// marked as a redelivery of the first (with when that one was processed)
// and handled as its source's LateArrivals says: the type's handler runs
// (LateProcess), none runs and it is stored processed without a job
// (LateSkip), or the source's reconcile handler runs instead
// (LateReconcile). Each is counted as result="late"; an event never seen
// before is not marked, and a redelivery of the late arrival within the
// window is a plain duplicate.
func TestLateArrivals(t *testing.T) {
	t.Parallel()
	b := setupLate(t)
	b.startWorkers(t)
	ctx := context.Background()
	send := func(source, id string) answer {
		return do(t, b.signed(t, source, id, []byte(`{"type":"order.paid"}`), time.Now()))
	}
	sources := []string{"proc", "skip", "recon"}
	for _, s := range sources {
		require.Equal(t, "accepted", send(s, "evt_1").Body["status"])
	}
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	require.Len(t, b.handled("type"), 3)
	b.pruneKeys(t, 3)

	want := map[string]string{"proc": "accepted", "skip": "duplicate", "recon": "accepted"}
	for _, s := range sources {
		a := send(s, "evt_1")
		require.Equal(t, http.StatusOK, a.Status, a.RawBody)
		require.Equal(t, want[s], a.Body["status"], s)
	}
	require.Equal(t, "accepted", send("proc", "evt_2").Body["status"], "an event never received")
	awaitSettled(t, b.pool, inbox.StatusProcessed)

	for _, s := range sources {
		ids := b.messagesOf(t, s, "evt_1")
		require.Len(t, ids, 2, s)
		first, err := b.inbox.Get(ctx, ids[0])
		require.NoError(t, err)
		require.Nil(t, first.RedeliveryOf, s)
		late, err := b.inbox.Get(ctx, ids[1])
		require.NoError(t, err)
		require.NotNil(t, late.RedeliveryOf, s)
		require.Equal(t, ids[0], late.RedeliveryOf.MessageID, s)
		require.NotNil(t, late.RedeliveryOf.ProcessedAt, s)
		require.True(t, late.RedeliveryOf.ProcessedAt.Equal(*first.ProcessedAt), s)
		require.Equal(t, inbox.StatusProcessed, late.Status, s)
		require.Equal(t, sources[late.RedeliveryOf.Policy], s)
	}
	skipped, err := b.inbox.Get(ctx, b.messagesOf(t, "skip", "evt_1")[1])
	require.NoError(t, err)
	require.Zero(t, skipped.JobID, "a skipped late arrival gets no job")
	require.Zero(t, skipped.Attempts)

	typeRuns := b.handled("type")
	require.Len(t, typeRuns, 5, "the first three, proc's late arrival and evt_2")
	var lateRuns int
	for _, m := range typeRuns {
		if m.RedeliveryOf != nil {
			lateRuns++
			require.Equal(t, "proc", m.Source, "only proc's late arrival runs the type's handler")
		}
	}
	require.Equal(t, 1, lateRuns)
	reconciled := b.handled("reconcile")
	require.Len(t, reconciled, 1)
	require.Equal(t, "recon", reconciled[0].Source)
	require.NotNil(t, reconciled[0].RedeliveryOf)
	require.Equal(t, 2, effectCount(t, b.pool, "type:proc:evt_1"))
	require.Equal(t, 1, effectCount(t, b.pool, "type:skip:evt_1"))
	require.Equal(t, 1, effectCount(t, b.pool, "type:recon:evt_1"))
	require.Equal(t, 1, effectCount(t, b.pool, "reconcile:recon:evt_1"))

	require.Equal(t, "duplicate", send("proc", "evt_1").Body["status"], "the late arrival claimed the key anew")
	got := telemetrytest.SumBy(t, b.metrics.Collect(t)["wharf_inbox_requests"], "source", "result")
	require.Equal(t, map[string]int64{
		"proc/accepted": 2, "proc/late": 1, "proc/duplicate": 1,
		"skip/accepted": 1, "skip/late": 1,
		"recon/accepted": 1, "recon/late": 1,
	}, got)
}

// TestLateArrivalsReceivedTogether: ReceiveManyTx marks the late arrivals
// of a batch among new events and duplicates, with the same policies; a
// skipped one gets no job and the others share the batch's jobs.
func TestLateArrivalsReceivedTogether(t *testing.T) {
	t.Parallel()
	b := setupLate(t)
	b.startWorkers(t)
	ctx := context.Background()
	first := receiveMany(t, b.pool, b.inbox, []inbox.Incoming{
		{Source: "proc", EventID: "a", Body: []byte(`{}`)},
		{Source: "skip", EventID: "b", Body: []byte(`{}`)},
	})
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	b.pruneKeys(t, 2)
	got := receiveMany(t, b.pool, b.inbox, []inbox.Incoming{
		{Source: "proc", EventID: "a", Body: []byte(`{}`)},
		{Source: "skip", EventID: "b", Body: []byte(`{}`)},
		{Source: "proc", EventID: "c", Body: []byte(`{}`)},
		{Source: "proc", EventID: "a", Body: []byte(`{}`)},
	})
	require.Equal(t, first[0].MessageID, got[0].RedeliveryOf)
	require.NotZero(t, got[0].JobID)
	require.False(t, got[0].Duplicate)
	require.Equal(t, first[1].MessageID, got[1].RedeliveryOf)
	require.Zero(t, got[1].JobID, "skipped")
	require.Equal(t, uuid.Nil, got[2].RedeliveryOf)
	require.Equal(t, got[0].JobID, got[2].JobID, "the late arrival shares the batch's job")
	require.True(t, got[3].Duplicate, "a repeat within the batch")
	require.Equal(t, got[0].MessageID, got[3].MessageID)

	awaitSettled(t, b.pool, inbox.StatusProcessed)
	late, err := b.inbox.Get(ctx, got[0].MessageID)
	require.NoError(t, err)
	require.Equal(t, first[0].MessageID, late.RedeliveryOf.MessageID)
	require.Equal(t, inbox.LateProcess, late.RedeliveryOf.Policy)
	require.NotNil(t, late.RedeliveryOf.ProcessedAt)
	skipped, err := b.inbox.Get(ctx, got[1].MessageID)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusProcessed, skipped.Status)
	require.Equal(t, inbox.LateSkip, skipped.RedeliveryOf.Policy)
}

// TestLatePolicyIsChecked: an unknown LatePolicy is refused.
func TestLatePolicyIsChecked(t *testing.T) {
	t.Parallel()
	cfg := &inbox.Config{Sources: []inbox.Source{{
		Name: "payments", Verifier: signature.NewStandardWebhooks(signature.Secrets{testSecret}, nil), LateArrivals: 7,
	}}}
	err := cfg.Validate()
	require.ErrorIs(t, err, inbox.ErrInvalidConfig)
	require.ErrorContains(t, err, "unknown LatePolicy 7")
}

// TestLateArrivalWhileThePruneCommits: a claim that waits for the prune
// deleting its key (the prune's transaction not yet committed) sees the
// past key the prune writes with the deletion: the claim statement's own
// snapshot, taken before the prune committed, does not.
func TestLateArrivalWhileThePruneCommits(t *testing.T) {
	t.Parallel()
	b := setupLate(t)
	b.startWorkers(t)
	ctx := context.Background()
	first := receiveMany(t, b.pool, b.inbox, []inbox.Incoming{{Source: "proc", EventID: "race", Body: []byte(`{}`)}})
	awaitSettled(t, b.pool, inbox.StatusProcessed)

	prune, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer prune.Rollback(ctx)
	n, err := dbsqlc.New(prune).RetentionInboxKeysDelete(ctx, dbsqlc.RetentionInboxKeysDeleteParams{
		Cutoff: time.Now().Add(time.Hour), ErasedCutoff: time.Now().Add(-time.Hour), BatchSize: 10,
	})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	got := make(chan inbox.Result, 1)
	go func() {
		var res *inbox.Result
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			var err error
			res, err = b.inbox.ReceiveTx(ctx, tx, inbox.Incoming{Source: "proc", EventID: "race", Body: []byte(`{}`)})
			return err
		})
		if err != nil {
			t.Error(err)
			res = &inbox.Result{}
		}
		got <- *res
	}()
	require.Eventually(t, func() bool {
		var waiting int
		err := b.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%InboxKeyClaimMany%'").Scan(&waiting)
		return err == nil && waiting == 1
	}, 10*time.Second, 5*time.Millisecond, "the claim waits for the prune")
	require.NoError(t, prune.Commit(ctx))
	res := <-got
	require.False(t, res.Duplicate)
	require.Equal(t, first[0].MessageID, res.RedeliveryOf, "the late arrival is told")
}

// TestSkippedLateArrivalKeepsTheOriginal: once a skipped late arrival's
// own key is pruned, a third receipt is a late arrival of the message
// whose effect was applied, not of the skipped one.
func TestSkippedLateArrivalKeepsTheOriginal(t *testing.T) {
	t.Parallel()
	b := setupLate(t)
	b.startWorkers(t)
	receive := func() inbox.Result {
		return receiveMany(t, b.pool, b.inbox, []inbox.Incoming{{Source: "skip", EventID: "thrice", Body: []byte(`{}`)}})[0]
	}
	first := receive()
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	b.pruneKeys(t, 1)
	second := receive()
	require.Equal(t, first.MessageID, second.RedeliveryOf)
	b.pruneKeys(t, 1)
	third := receive()
	require.Equal(t, first.MessageID, third.RedeliveryOf, "the skipped message applied nothing")
	require.Len(t, b.handled("type"), 1)
}

// TestLateArrivalUnderRepeatableReadDefault: the HTTP receiver's batch
// runs at READ COMMITTED even where the database's default isolation is
// REPEATABLE READ, under which the claim would read its transaction's
// snapshot and miss a past key the prune committed while it waited.
func TestLateArrivalUnderRepeatableReadDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.NewURL(t)
	admin, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	_, err = admin.Exec(ctx, "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = %L', current_database(), 'repeatable read'); END $$")
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, url) // its connections start with the new default
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var iso string
	require.NoError(t, pool.QueryRow(ctx, "SHOW default_transaction_isolation").Scan(&iso))
	require.Equal(t, "repeatable read", iso)

	b := setupLateOn(t, pool)
	b.startWorkers(t)
	send := func() answer {
		return do(t, b.signed(t, "proc", "rr", []byte(`{"type":"order.paid"}`), time.Now()))
	}
	require.Equal(t, "accepted", send().Body["status"])
	awaitSettled(t, b.pool, inbox.StatusProcessed)

	prune, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer prune.Rollback(ctx)
	n, err := dbsqlc.New(prune).RetentionInboxKeysDelete(ctx, dbsqlc.RetentionInboxKeysDeleteParams{
		Cutoff: time.Now().Add(time.Hour), ErasedCutoff: time.Now().Add(-time.Hour), BatchSize: 10,
	})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	got := make(chan answer, 1)
	go func() { got <- send() }()
	require.Eventually(t, func() bool {
		var waiting int
		err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%InboxKeyClaimMany%'").Scan(&waiting)
		return err == nil && waiting == 1
	}, 10*time.Second, 5*time.Millisecond, "the claim waits for the prune")
	require.NoError(t, prune.Commit(ctx))
	require.Equal(t, "accepted", (<-got).Body["status"])
	ids := b.messagesOf(t, "proc", "rr")
	require.Len(t, ids, 2)
	late, err := b.inbox.Get(ctx, ids[1])
	require.NoError(t, err)
	require.NotNil(t, late.RedeliveryOf, "the late arrival is told")
	require.Equal(t, ids[0], late.RedeliveryOf.MessageID)
}
