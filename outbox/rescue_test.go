package outbox_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
)

// deadLog collects what Config.OnDead is told.
type deadLog struct {
	mu   sync.Mutex
	dead []outbox.DeadDelivery
}

func (l *deadLog) onDead(_ context.Context, d outbox.DeadDelivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dead = append(l.dead, d)
}

func (l *deadLog) reasons() map[uuid.UUID]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[uuid.UUID]string{}
	for _, d := range l.dead {
		out[d.DeliveryID] = d.Reason
	}
	return out
}

// rescuer returns an outbox on pool whose clock is RescueAfter ahead, so
// that what was left a moment ago has, to its Rescue, been left long
// enough to be stranded; what it makes dead is told to dead.
func rescuer(t *testing.T, pool *pgxpool.Pool, dead *deadLog) *outbox.Outbox {
	t.Helper()
	cfg := testConfig()
	cfg.Now = func() time.Time { return time.Now().Add(outbox.RescueAfter + time.Second) }
	cfg.OnDead = dead.onDead
	o, err := outbox.New(pool, cfg)
	require.NoError(t, err)
	return o
}

// endJobs puts the River jobs of kind whose args hold delivery id (any
// job of kind when id is uuid.Nil) in state, as River leaves a job it
// discarded or cancelled, or deletes them when state is "".
func endJobs(t *testing.T, pool *pgxpool.Pool, kind string, id uuid.UUID, state string) {
	t.Helper()
	where := `kind = $1 AND ($2::uuid = '00000000-0000-0000-0000-000000000000'
		OR args->>'delivery_id' = $2::text OR args->'deliveries' @> jsonb_build_array(jsonb_build_object('delivery_id', $2::text)))`
	var err error
	if state == "" {
		_, err = pool.Exec(context.Background(), `DELETE FROM river_job WHERE `+where, kind, id)
	} else {
		_, err = pool.Exec(context.Background(), `UPDATE river_job SET state = $3, finalized_at = now() WHERE `+where, kind, id, state)
	}
	require.NoError(t, err)
}

func TestRescue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("SettlesDeliveriesWhoseJobEndedWithoutThem", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		receiver := okSink(t)
		ep := b.endpoint(t, receiver.URL(), nil)
		batch := b.publish(t, events(3)...) // a batch job
		cancelled := b.publish(t, events(1)...)[0]
		discarded := b.publish(t, events(1)...)[0]
		gone := b.publish(t, events(1)...)[0]
		live := b.publish(t, events(1)...)[0]
		ids := map[string]uuid.UUID{}
		for _, r := range append(batch, cancelled, discarded, gone, live) {
			ids[r.EventID] = b.onlyDelivery(t, r.EventID).ID
		}
		// The batch job was discarded after a run that recorded a failed
		// attempt of its first delivery and died before handing it over.
		_, err := b.pool.Exec(ctx, `UPDATE wharf_outbox_deliveries SET status = 'retrying', attempts = 1, next_attempt_at = now() WHERE id = $1`,
			ids[batch[0].EventID])
		require.NoError(t, err)
		endJobs(t, b.pool, outbox.DeliveryBatchKind, uuid.Nil, "discarded")
		_, err = adminClient(t, b.pool).JobCancel(ctx, b.ownJobIDs(t, ids[cancelled.EventID])[0])
		require.NoError(t, err)
		endJobs(t, b.pool, outbox.DeliveryKind, ids[discarded.EventID], "discarded")
		endJobs(t, b.pool, outbox.DeliveryKind, ids[gone.EventID], "")

		var dead deadLog
		n, err := rescuer(t, b.pool, &dead).Rescue(ctx)
		require.NoError(t, err)
		require.Equal(t, 6, n, "the batch's three, and the cancelled, discarded and deleted jobs' deliveries")

		d := b.onlyDelivery(t, cancelled.EventID)
		require.Equal(t, outbox.StatusDead, d.Status, "cancelled: as its worker would have, had it lived")
		require.Contains(t, d.LastError, "cancelled")
		d = b.onlyDelivery(t, discarded.EventID)
		require.Equal(t, outbox.StatusDead, d.Status, "a job of its own discarded: past its attempts")
		require.Contains(t, d.LastError, "attempts exhausted")
		require.Equal(t, map[uuid.UUID]string{
			ids[cancelled.EventID]: b.onlyDelivery(t, cancelled.EventID).LastError,
			ids[discarded.EventID]: b.onlyDelivery(t, discarded.EventID).LastError,
		}, dead.reasons(), "OnDead is told")
		for i, r := range batch {
			offset := 0
			if i == 0 {
				offset = 1 // the batch's recorded attempt
			}
			require.Equal(t, []outbox.DeliveryArgs{{DeliveryID: ids[r.EventID], Generation: 1, AttemptOffset: offset}},
				b.ownJobs(t, ids[r.EventID]), "a job of its own, going on from the batch's attempts")
		}
		require.Equal(t, []outbox.DeliveryArgs{{DeliveryID: ids[gone.EventID], Generation: 1}}, b.ownJobs(t, ids[gone.EventID]))
		require.Equal(t, []outbox.DeliveryArgs{{DeliveryID: ids[live.EventID]}}, b.ownJobs(t, ids[live.EventID]), "left alone")

		startRiver(t, b.pool, b.outbox)
		for _, r := range append(batch, gone, live) {
			d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
			if r.EventID == batch[0].EventID {
				require.Equal(t, 2, d.Attempts)
				continue
			}
			require.Equal(t, 1, d.Attempts)
		}
		n, err = rescuer(t, b.pool, &dead).Rescue(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "nothing is left to rescue")
		require.Len(t, receiver.all(), 5, "each once")
	})

	t.Run("LeavesAloneWhatIsNotStranded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		b.endpoint(t, okSink(t).URL(), nil)
		recent := b.publish(t, events(1)...)[0]
		waiting := b.publish(t, events(1)...)[0]
		finished := b.publish(t, events(1)...)[0]
		notDue := b.publish(t, events(1)...)[0]
		for _, r := range []*outbox.PublishResult{recent, finished, notDue} {
			endJobs(t, b.pool, outbox.DeliveryKind, b.onlyDelivery(t, r.EventID).ID, "cancelled")
		}
		_, err := b.pool.Exec(ctx, `UPDATE wharf_outbox_deliveries SET status = 'succeeded' WHERE id = $1`, b.onlyDelivery(t, finished.EventID).ID)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `UPDATE wharf_outbox_deliveries SET status = 'retrying', next_attempt_at = now() + interval '1 hour' WHERE id = $1`,
			b.onlyDelivery(t, notDue.EventID).ID)
		require.NoError(t, err)

		var dead deadLog
		n, err := b.outbox.Rescue(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "changed a moment ago: it may be in the middle of getting a job")
		_, err = b.pool.Exec(ctx, `UPDATE wharf_outbox_deliveries SET updated_at = updated_at - interval '1 hour' WHERE id <> $1`,
			b.onlyDelivery(t, recent.EventID).ID)
		require.NoError(t, err)
		n, err = b.outbox.Rescue(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "a live job, a finished delivery, and a retry not yet due (its job may be scheduled for it)")
		require.Empty(t, dead.reasons())
		require.Equal(t, outbox.StatusPending, b.onlyDelivery(t, recent.EventID).Status)
		require.Equal(t, outbox.StatusPending, b.onlyDelivery(t, waiting.EventID).Status)
		require.Equal(t, outbox.StatusRetrying, b.onlyDelivery(t, notDue.EventID).Status)
	})

	// A delivery given a new job (here by a replay) after Rescue's query
	// saw it stranded and before Rescue locked it is left to that job:
	// neither handed over again nor made dead.
	recheck := func(t *testing.T, kind, state string, n int) {
		b := setup(t, testConfig())
		ep := b.endpoint(t, okSink(t).URL(), nil)
		res := b.publish(t, events(n)...)
		replayed := b.onlyDelivery(t, res[0].EventID)
		endJobs(t, b.pool, kind, uuid.Nil, state)

		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		require.NoError(t, b.outbox.DeliveryReplayTx(ctx, tx, replayed.ID), "no live job: the replay recovers it")
		var dead deadLog
		type result struct {
			n   int
			err error
		}
		done := make(chan result, 1)
		go func() {
			n, err := rescuer(t, b.pool, &dead).Rescue(ctx)
			done <- result{n, err}
		}()
		awaitLockWait(t, b.pool)
		require.NoError(t, tx.Commit(ctx))
		var got result
		select {
		case got = <-done:
		case <-time.After(awaitTimeout):
			t.Fatal("Rescue never returned")
		}
		require.NoError(t, got.err)
		require.Equal(t, n-1, got.n, "only the others")
		require.Empty(t, dead.reasons())
		d := b.onlyDelivery(t, res[0].EventID)
		require.Equal(t, outbox.StatusPending, d.Status)
		var since []outbox.DeliveryArgs
		for _, args := range b.ownJobs(t, d.ID) {
			if args.Generation > 0 {
				since = append(since, args)
			}
		}
		require.Equal(t, []outbox.DeliveryArgs{{DeliveryID: d.ID, Generation: 1}}, since, "the replay's job only")
		startRiver(t, b.pool, b.outbox)
		for _, r := range res {
			b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
		}
	}
	t.Run("ReplayedAfterTheQueryIsNotHandedOnAgain", func(t *testing.T) {
		t.Parallel()
		recheck(t, outbox.DeliveryBatchKind, "discarded", 3)
	})
	t.Run("ReplayedAfterTheQueryIsNotMadeDead", func(t *testing.T) {
		t.Parallel()
		recheck(t, outbox.DeliveryKind, "cancelled", 1)
	})

	t.Run("TwoAtOnceSettleEachDeliveryOnce", func(t *testing.T) {
		t.Parallel()
		// An operator's Rescue beside the periodic job's, over deliveries
		// of two endpoints: each delivery is settled once, and neither
		// Rescue fails (no deadlock).
		b := setup(t, testConfig())
		var res []*outbox.PublishResult
		for range 2 {
			b.endpoint(t, okSink(t).URL(), nil)
		}
		for range 3 {
			res = append(res, b.publish(t, events(8)...)...)
		}
		endJobs(t, b.pool, outbox.DeliveryBatchKind, uuid.Nil, "discarded")
		var dead deadLog
		results := make(chan error, 2)
		var settled atomic.Int64
		for range 2 {
			go func() {
				n, err := rescuer(t, b.pool, &dead).Rescue(ctx)
				settled.Add(int64(n))
				results <- err
			}()
		}
		for range 2 {
			select {
			case err := <-results:
				require.NoError(t, err)
			case <-time.After(awaitTimeout):
				t.Fatal("a Rescue never returned")
			}
		}
		require.EqualValues(t, 48, settled.Load(), "24 events to two endpoints, each settled once")
		for _, r := range res {
			list, err := b.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{EventID: r.EventID})
			require.NoError(t, err)
			require.Len(t, list, 2)
			for _, d := range list {
				require.Equal(t, []outbox.DeliveryArgs{{DeliveryID: d.ID, Generation: 1}}, b.ownJobs(t, d.ID))
			}
		}
	})

	t.Run("PeriodicJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		jobs := b.outbox.PeriodicJobs()
		require.Len(t, jobs, 2, "rescue and notices")
		client := startClient(t, b.pool, b.outbox, func(cfg *river.Config) { cfg.PeriodicJobs = jobs })
		events, cancel := client.Subscribe(river.EventKindJobCompleted)
		defer cancel()
		for {
			select {
			case ev := <-events:
				if ev.Job.Kind == "wharf_outbox_rescue" {
					require.Equal(t, b.outbox.Queue(), ev.Job.Queue)
					return
				}
			case <-time.After(awaitTimeout):
				t.Fatal("the rescue job never ran")
			}
		}
	})
}

// ownJobIDs returns the ids of the jobs of their own (DeliveryArgs) of
// delivery id, oldest first.
func (b *testBundle) ownJobIDs(t *testing.T, id uuid.UUID) []int64 {
	t.Helper()
	ids, _ := deliveryJobs(t, b.pool, id)
	return ids
}

// awaitLockWait waits until a session of the test's database waits for a
// lock.
func awaitLockWait(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
		return n > 0
	}, awaitTimeout, 5*time.Millisecond, "nothing waits for a lock")
}

// TestRescueLeavesADeliveryWhoseJobWasRetried: an operator retries a
// cancelled delivery job through River (riverui, which wharf serve mounts)
// after Rescue's first look saw the job cancelled, before Rescue settles
// the delivery. Rescue re-checked only the delivery's generation and
// status, which a River retry does not change: it dead-lettered the
// delivery and called OnDead while its job was available again, and that
// job then found it dead and sent nothing. The endpoint row held FOR
// UPDATE only makes Rescue's window (its query's run time) deterministic.
func TestRescueLeavesADeliveryWhoseJobWasRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, testConfig())
	ep := b.endpoint(t, okSink(t).URL(), nil)
	res := b.publish(t, events(1)...)[0]
	d := b.onlyDelivery(t, res.EventID)
	jobID := b.ownJobIDs(t, d.ID)[0]
	admin := adminClient(t, b.pool)
	_, err := admin.JobCancel(ctx, jobID) // not running: cancelled at once, and no worker dead-letters it
	require.NoError(t, err)

	hold, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = hold.Rollback(ctx) }()
	_, err = hold.Exec(ctx, "SELECT 1 FROM wharf_outbox_endpoints WHERE id = $1 FOR UPDATE", ep.ID)
	require.NoError(t, err)

	var dead deadLog
	done := make(chan error, 1)
	go func() {
		_, err := rescuer(t, b.pool, &dead).Rescue(ctx)
		done <- err
	}()
	awaitLockWait(t, b.pool) // Rescue has its snapshot (job cancelled) and waits for the endpoint
	_, err = admin.JobRetry(ctx, jobID)
	require.NoError(t, err)
	require.NoError(t, hold.Rollback(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Rescue never returned")
	}
	after := b.onlyDelivery(t, res.EventID)
	require.NotEqual(t, outbox.StatusDead, after.Status, "Rescue dead-lettered a delivery whose job an operator had just retried")
	require.Empty(t, dead.reasons())
}
