package outbox_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
)

// Tests that no delivery is left pending or retrying with no River job to
// finish it, and that replays and stale jobs never act on one delivery
// together.

// deliveryJobs returns the ids and states of deliveryID's River jobs, oldest
// first.
func deliveryJobs(t *testing.T, pool *pgxpool.Pool, deliveryID uuid.UUID) (ids []int64, states []string) {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT id, state FROM river_job WHERE kind = $1 AND args->>'delivery_id' = $2 ORDER BY id`,
		outbox.DeliveryKind, deliveryID.String())
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var id int64
		var state string
		require.NoError(t, rows.Scan(&id, &state))
		ids = append(ids, id)
		states = append(states, state)
	}
	require.NoError(t, rows.Err())
	return ids, states
}

// onlyDelivery returns the one delivery of eventID.
func (b *testBundle) onlyDelivery(t *testing.T, eventID string) *outbox.Delivery {
	t.Helper()
	list, err := b.outbox.DeliveryList(context.Background(), &outbox.DeliveryListParams{EventID: eventID})
	require.NoError(t, err)
	require.Len(t, list, 1)
	return list[0]
}

// snoozes returns how often River snoozed deliveryID's (only) job.
func snoozes(t *testing.T, pool *pgxpool.Pool, deliveryID uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT COALESCE((metadata->>'snoozes')::int, 0) FROM river_job WHERE kind = $1 AND args->>'delivery_id' = $2`,
		outbox.DeliveryKind, deliveryID.String()).Scan(&n))
	return n
}

// adminClient is a River client that is never started, for the job
// operations an operator would make (cancel, retry).
func adminClient(t *testing.T, pool *pgxpool.Pool) *river.Client[pgx.Tx] {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: quietLogger()})
	require.NoError(t, err)
	return client
}

func TestRecovery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ScheduleLengthenedAfterInsertStillDeadLetters", func(t *testing.T) {
		t.Parallel()
		// Jobs inserted under a 2-attempt schedule (River MaxAttempts 5) are
		// worked after a redeploy with an 8-attempt one: the job, not only
		// the new schedule, bounds the attempts, so the last one that River
		// allows still dead-letters the delivery.
		short := testConfig()
		short.RetrySchedule = []time.Duration{0, 10 * time.Millisecond}
		bundle := setup(t, short)
		receiver := newSink(t, status(http.StatusInternalServerError))
		ep := bundle.endpoint(t, receiver.URL(), nil)
		res := bundle.publish(t, &outbox.Event{Type: "x"})

		long := testConfig()
		long.RetrySchedule = []time.Duration{0, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond,
			10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}
		redeployed, err := outbox.New(bundle.pool, long)
		require.NoError(t, err)
		startRiver(t, bundle.pool, redeployed)

		d := bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusDead)
		var maxAttempts int
		require.NoError(t, bundle.pool.QueryRow(ctx, `SELECT max_attempts FROM river_job`).Scan(&maxAttempts))
		require.Equal(t, 2+3, maxAttempts, "the schedule at insert and 3 spare runs")
		require.Equal(t, 4, d.Attempts, "MaxAttempts less one: a spare run is left")
		require.Nil(t, d.NextAttemptAt)
		require.Eventually(t, func() bool {
			_, states := deliveryJobs(t, bundle.pool, d.ID)
			return len(states) == 1 && states[0] == "cancelled"
		}, 10*time.Second, 10*time.Millisecond, "the job ends itself; River never discards it")
		require.Len(t, receiver.all(), 4)
	})

	t.Run("RemoteCancelDuringAttemptDeadLetters", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		var healthy atomic.Bool
		receiver := newSink(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			if healthy.Load() {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			<-r.Context().Done() // answers only once the sender gives up
		})
		ep := bundle.endpoint(t, receiver.URL(), nil)
		client := startRiver(t, bundle.pool, bundle.outbox)
		res := bundle.publish(t, &outbox.Event{Type: "x"})

		select {
		case <-receiver.arrived:
		case <-time.After(15 * time.Second):
			t.Fatal("the delivery was never attempted")
		}
		d := bundle.onlyDelivery(t, res[0].EventID)
		ids, _ := deliveryJobs(t, bundle.pool, d.ID)
		require.Len(t, ids, 1)
		_, err := client.JobCancel(ctx, ids[0])
		require.NoError(t, err)

		d = bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusDead)
		require.Contains(t, d.LastError, "cancelled")
		require.Equal(t, 1, d.Attempts, "the interrupted attempt is recorded")
		attempts, err := bundle.outbox.AttemptList(ctx, d.ID)
		require.NoError(t, err)
		require.Len(t, attempts, 1)
		require.Contains(t, attempts[0].Error, "cancelled")
		require.Eventually(t, func() bool {
			_, states := deliveryJobs(t, bundle.pool, d.ID)
			return states[0] == "cancelled"
		}, 10*time.Second, 10*time.Millisecond)

		// A dead delivery replays as usual.
		healthy.Store(true)
		require.NoError(t, bundle.outbox.DeliveryReplay(ctx, d.ID))
		bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
	})

	t.Run("ReplayRecoversDeliveryWhoseJobIsGoneAndSupersedesIt", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		receiver := okSink(t)
		ep := bundle.endpoint(t, receiver.URL(), nil)
		res := bundle.publish(t, &outbox.Event{Type: "x"})
		d := bundle.onlyDelivery(t, res[0].EventID)
		admin := adminClient(t, bundle.pool)

		// While its job waits, the delivery is in progress.
		ids, _ := deliveryJobs(t, bundle.pool, d.ID)
		require.Len(t, ids, 1)
		oldJob := ids[0]
		require.ErrorIs(t, bundle.outbox.DeliveryReplay(ctx, d.ID), outbox.ErrDeliveryInProgress)

		// An operator cancels the job: the delivery stays pending with no
		// job to attempt it, and a replay recovers it.
		_, err := admin.JobCancel(ctx, oldJob)
		require.NoError(t, err)
		require.Equal(t, outbox.StatusPending, bundle.onlyDelivery(t, res[0].EventID).Status)
		require.NoError(t, bundle.outbox.DeliveryReplay(ctx, d.ID))
		require.ErrorIs(t, bundle.outbox.DeliveryReplay(ctx, d.ID), outbox.ErrDeliveryInProgress,
			"the replay's own job is live")

		// The operator also retries the old job (as from River UI): it runs
		// beside the replay's, and must neither send nor record.
		_, err = admin.JobRetry(ctx, oldJob)
		require.NoError(t, err)
		startRiver(t, bundle.pool, bundle.outbox)

		got := bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		require.Eventually(t, func() bool {
			_, states := deliveryJobs(t, bundle.pool, d.ID)
			return len(states) == 2 && states[0] == "completed" && states[1] == "completed"
		}, 10*time.Second, 10*time.Millisecond, "both jobs ran")
		require.Equal(t, 1, got.Attempts)
		require.Len(t, receiver.all(), 1, "the superseded job sent nothing")
		attempts, err := bundle.outbox.AttemptList(ctx, d.ID)
		require.NoError(t, err)
		require.Len(t, attempts, 1)
	})

	t.Run("RecordNeverReopensAFinishedDelivery", func(t *testing.T) {
		t.Parallel()
		// While the attempt is in flight, another writer finishes the
		// delivery (here by hand). The attempt's failure must not turn it
		// back into retrying, nor count as one of its attempts.
		bundle := setup(t, testConfig())
		type finish struct {
			at  time.Time
			err error
		}
		finished := make(chan finish, 1)
		receiver := newSink(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			var f finish
			f.err = bundle.pool.QueryRow(r.Context(), `
				UPDATE wharf_outbox_deliveries SET status = 'succeeded', succeeded_at = now(), updated_at = now()
				RETURNING updated_at`).Scan(&f.at)
			select {
			case finished <- f:
			default: // a later attempt (there should be none)
			}
			w.WriteHeader(http.StatusInternalServerError)
		})
		ep := bundle.endpoint(t, receiver.URL(), nil)
		startRiver(t, bundle.pool, bundle.outbox)
		res := bundle.publish(t, &outbox.Event{Type: "x"})

		var f finish
		select {
		case f = <-finished:
		case <-time.After(15 * time.Second):
			t.Fatal("the delivery was never attempted")
		}
		require.NoError(t, f.err)
		d := bundle.onlyDelivery(t, res[0].EventID)
		require.Eventually(t, func() bool {
			_, states := deliveryJobs(t, bundle.pool, d.ID)
			return states[0] == "completed"
		}, 10*time.Second, 10*time.Millisecond)
		d = bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		require.Zero(t, d.Attempts)
		require.Empty(t, d.LastError)
		require.Equal(t, f.at, d.UpdatedAt)
		attempts, err := bundle.outbox.AttemptList(ctx, d.ID)
		require.NoError(t, err)
		require.Empty(t, attempts)
		got, err := bundle.outbox.EndpointGet(ctx, ep.ID)
		require.NoError(t, err)
		require.Equal(t, 1, got.ConsecutiveFailures, "the endpoint's health still counts the real request")
	})

	t.Run("TransientDatabaseErrorsSnoozeWithoutUsingAttempts", func(t *testing.T) {
		t.Parallel()
		// One attempt only: a database error that used it would leave
		// nothing to deliver with.
		bundle, proxy, direct, ob := proxiedOneAttemptOutbox(t)
		receiver := okSink(t)
		ep := bundle.endpoint(t, receiver.URL(), nil)
		res := bundle.publish(t, &outbox.Event{Type: "x"})
		var deliveryID uuid.UUID
		require.NoError(t, direct.QueryRow(ctx, `SELECT id FROM wharf_outbox_deliveries`).Scan(&deliveryID))

		// The outbox loses its database; River (on its own pool) still runs
		// the job.
		proxy.SetDown(true)
		startRiver(t, direct, ob)
		require.Eventually(t, func() bool { return snoozes(t, direct, deliveryID) >= 2 },
			15*time.Second, 10*time.Millisecond, "the job snoozes while the database is unreachable")
		proxy.SetDown(false)

		d := bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		require.Equal(t, 1, d.Attempts)
		var attempt int
		var errorCount int
		require.NoError(t, direct.QueryRow(ctx,
			`SELECT attempt, COALESCE(array_length(errors, 1), 0) FROM river_job WHERE args->>'delivery_id' = $1`,
			deliveryID.String()).Scan(&attempt, &errorCount))
		require.Equal(t, 1, attempt, "snoozes use no attempt")
		require.Zero(t, errorCount, "no failed run")
		require.Len(t, receiver.all(), 1)
	})

	t.Run("DatabaseLostAtTheLastAttemptStillDeadLetters", func(t *testing.T) {
		t.Parallel()
		bundle, proxy, direct, ob := proxiedOneAttemptOutbox(t)
		// The only attempt is answered just after the outbox lost its
		// database: its outcome cannot be recorded, and the runs after it
		// cannot load the delivery until the database is back.
		receiver := newSink(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			proxy.SetDown(true)
			w.WriteHeader(http.StatusInternalServerError)
		})
		ep := bundle.endpoint(t, receiver.URL(), nil)
		res := bundle.publish(t, &outbox.Event{Type: "x"})
		var deliveryID uuid.UUID
		require.NoError(t, direct.QueryRow(ctx, `SELECT id FROM wharf_outbox_deliveries`).Scan(&deliveryID))
		startRiver(t, direct, ob)

		require.Eventually(t, func() bool { return snoozes(t, direct, deliveryID) >= 3 },
			15*time.Second, 10*time.Millisecond, "later runs wait for the database without using River's attempts")
		proxy.SetDown(false)

		d := bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusDead)
		require.Contains(t, d.LastError, "attempts exhausted")
		require.Len(t, receiver.all(), 1)
		require.Eventually(t, func() bool {
			_, states := deliveryJobs(t, direct, deliveryID)
			return states[0] == "cancelled"
		}, 10*time.Second, 10*time.Millisecond)
	})

	t.Run("CappedEndpointBacklogSnoozesLonger", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, singleJobConfig()) // BusyRetryDelay 20 ms
		release := make(chan struct{})
		receiver := newSink(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusNoContent)
		})
		ep := bundle.endpoint(t, receiver.URL(), &outbox.EndpointParams{MaxInFlight: 1})
		startRiver(t, bundle.pool, bundle.outbox)
		res := bundle.publish(t, &outbox.Event{Type: "x", Data: 1}, &outbox.Event{Type: "x", Data: 2})

		var first received
		select {
		case first = <-receiver.arrived:
		case <-time.After(15 * time.Second):
			t.Fatal("no delivery was attempted")
		}
		waiting := res[0].EventID
		if first.Header.Get("webhook-id") == waiting {
			waiting = res[1].EventID
		}
		d := bundle.onlyDelivery(t, waiting)

		// BusyRetryDelay is 20 ms: the sixth snooze, after five, waits
		// 20 ms doubled five times (640 ms), where a fixed delay would wait
		// 20 ms every time. River stamps a snoozed job's scheduled_at with
		// the end of the wait and its attempted_at with the run that
		// snoozed it.
		require.Eventually(t, func() bool {
			var n int
			var state string
			var wait float64
			require.NoError(t, bundle.pool.QueryRow(ctx, `
				SELECT COALESCE((metadata->>'snoozes')::int, 0), state, EXTRACT(EPOCH FROM scheduled_at - attempted_at)::float8
				FROM river_job WHERE args->>'delivery_id' = $1`, d.ID.String()).Scan(&n, &state, &wait))
			return n >= 6 && state != "running" && wait >= 0.6
		}, 15*time.Second, 5*time.Millisecond, "the busy snooze grows with the snooze count")
		require.Len(t, receiver.all(), 1, "the cap holds")

		close(release)
		for _, r := range res {
			bundle.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
		}
	})

	t.Run("FirstScheduleEntryDelaysFirstAttempt", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.RetrySchedule = []time.Duration{700 * time.Millisecond, 10 * time.Millisecond}
		bundle := setup(t, cfg)
		receiver := okSink(t)
		ep := bundle.endpoint(t, receiver.URL(), nil)

		published := time.Now()
		res := bundle.publish(t, &outbox.Event{Type: "x"})
		d := bundle.onlyDelivery(t, res[0].EventID)
		require.NotNil(t, d.NextAttemptAt)
		require.Equal(t, d.CreatedAt.Add(700*time.Millisecond), *d.NextAttemptAt)
		var state string
		var delay float64
		require.NoError(t, bundle.pool.QueryRow(ctx,
			`SELECT state, EXTRACT(EPOCH FROM scheduled_at - created_at)::float8 FROM river_job WHERE args->>'delivery_id' = $1`,
			d.ID.String()).Scan(&state, &delay))
		require.Equal(t, "scheduled", state)
		// scheduled_at is taken after the transaction's now() (created_at)
		// and the statements before the insert: at least the wait later.
		require.GreaterOrEqual(t, delay, 0.69, "River runs the job after the first entry's wait")
		require.Less(t, delay, 1.4, "River runs the job after the first entry's wait only")

		startRiver(t, bundle.pool, bundle.outbox)
		bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		got := receiver.all()
		require.Len(t, got, 1)
		require.GreaterOrEqual(t, got[0].At.Sub(published), 700*time.Millisecond)

		// A replay is sent at once.
		require.NoError(t, bundle.outbox.DeliveryReplay(ctx, d.ID))
		ids, _ := deliveryJobs(t, bundle.pool, d.ID)
		require.NoError(t, bundle.pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, ids[1]).Scan(&state))
		require.NotEqual(t, "scheduled", state)
	})

	t.Run("LeasesIgnoreClockSkewBetweenNodes", func(t *testing.T) {
		t.Parallel()
		// Two nodes share an endpoint capped at one request in flight;
		// node B's clock is an hour ahead of node A's. A lease node A
		// takes must hold for node B too.
		pool := testdb.New(t)
		cfgA := testConfig()
		cfgA.Queue = "node_a"
		nodeA, err := outbox.New(pool, cfgA)
		require.NoError(t, err)
		cfgB := testConfig()
		cfgB.Queue = "node_b"
		cfgB.Now = func() time.Time { return time.Now().Add(time.Hour) }
		nodeB, err := outbox.New(pool, cfgB)
		require.NoError(t, err)
		a := &testBundle{pool: pool, outbox: nodeA}
		b := &testBundle{pool: pool, outbox: nodeB}

		release := make(chan struct{})
		receiver := newSink(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusNoContent)
		})
		ep := a.endpoint(t, receiver.URL(), &outbox.EndpointParams{MaxInFlight: 1})
		startRiver(t, pool, nodeA)
		startRiver(t, pool, nodeB)

		resA := a.publish(t, &outbox.Event{Type: "x", Data: "a"})
		select {
		case <-receiver.arrived:
		case <-time.After(15 * time.Second):
			t.Fatal("node A never sent its delivery")
		}
		resB := b.publish(t, &outbox.Event{Type: "x", Data: "b"})
		dB := b.onlyDelivery(t, resB[0].EventID)
		require.Eventually(t, func() bool { return snoozes(t, pool, dB.ID) >= 2 }, 15*time.Second, 5*time.Millisecond,
			"node B waits for the slot node A holds")
		require.Len(t, receiver.all(), 1)
		require.Equal(t, int64(1), receiver.maxSeen.Load())

		close(release)
		a.awaitDelivery(t, ep.ID, resA[0].EventID, outbox.StatusSucceeded)
		b.awaitDelivery(t, ep.ID, resB[0].EventID, outbox.StatusSucceeded)
		require.Equal(t, int64(1), receiver.maxSeen.Load())
	})
}

// proxiedOneAttemptOutbox returns an outbox with a one-attempt schedule whose
// database goes through a proxy the test can cut, with a bundle and a direct
// pool (for River and the test's own queries) that stay connected.
func proxiedOneAttemptOutbox(t *testing.T) (*testBundle, *testdb.Proxy, *pgxpool.Pool, *outbox.Outbox) {
	t.Helper()
	ctx := context.Background()
	url := testdb.NewURL(t)
	proxy, proxied := testdb.NewProxy(t, url)
	direct, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(direct.Close)
	outboxPool, err := pgxpool.New(ctx, proxied)
	require.NoError(t, err)
	t.Cleanup(outboxPool.Close)
	cfg := testConfig()
	cfg.RetrySchedule = []time.Duration{0}
	ob, err := outbox.New(outboxPool, cfg)
	require.NoError(t, err)
	return &testBundle{pool: direct, outbox: ob}, proxy, direct, ob
}
