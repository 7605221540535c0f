package outbox_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/signature"
)

// A worker process killed between sending a delivery and recording its
// attempt: the attempt is never recorded, River rescues the job, and the
// delivery goes again with the same webhook-id and body.
func TestCrashBetweenSendAndRecord(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a subprocess")
	}
	ctx := context.Background()
	url := testdb.NewURL(t)
	bundle := openBundle(t, url, testConfig())

	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	receiver := newSink(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			// The first attempt reached the receiver; its answer never
			// gets back before the worker dies.
			select {
			case <-hold:
			case <-r.Context().Done():
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	ep := bundle.endpoint(t, receiver.URL(), nil)
	res := bundle.publish(t, &outbox.Event{Type: "payment.captured", Data: map[string]int{"amount": 5}})

	// The parent's client must become the leader (and run the stuck-job
	// rescuer) once the node is gone.
	node := startNodeProcess(t, nodeOptions{URL: url, Name: "crash", Follower: true})
	select {
	case <-receiver.arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the node process never sent the delivery")
	}
	node.Kill() // SIGKILL: no deferred cleanup, no recording

	d := bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusPending)
	require.Zero(t, d.Attempts, "the killed attempt was never recorded")

	// River rescues a job only once it has been running longer than both its
	// timeout (a delivery's: MaxEndpointTimeout plus 50 s) and
	// RescueStuckJobsAfter; the rescuer runs when the client becomes leader,
	// then every 30 s. The crash is made to have happened that long ago.
	tag, err := bundle.pool.Exec(ctx, `UPDATE river_job SET attempted_at = now() - interval '2 minutes' WHERE state = 'running'`)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	startClient(t, bundle.pool, bundle.outbox, func(cfg *river.Config) { cfg.JobTimeout, cfg.RescueStuckJobsAfter = time.Second, time.Second })

	d = bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
	require.Equal(t, 1, d.Attempts)
	got := receiver.all()
	require.Len(t, got, 2, "delivered again after the crash")
	require.Equal(t, res[0].EventID, got[0].Header.Get("webhook-id"))
	require.Equal(t, res[0].EventID, got[1].Header.Get("webhook-id"), "same webhook-id: the receiver dedupes")
	require.Equal(t, got[0].Body, got[1].Body)
}

// A node killed in the middle of a batch job: the attempts it recorded
// stand, the one it sent without recording is sent again, and the rest
// are sent when River rescues the job; nothing is left without a job.
func TestCrashInTheMiddleOfABatch(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a subprocess")
	}
	ctx := context.Background()
	url := testdb.NewURL(t)
	bundle := openBundle(t, url, testConfig())

	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	held := make(chan struct{}, 1)
	var holdID atomic.Value // the webhook-id whose first request is held
	holdID.Store("")
	var heldOnce atomic.Bool
	receiver := newSink(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(signature.HeaderWebhookID) == holdID.Load() && heldOnce.CompareAndSwap(false, true) {
			// The batch's second delivery reached the receiver; the
			// answer never gets back before the node dies.
			held <- struct{}{}
			select {
			case <-hold:
			case <-r.Context().Done():
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	ep := bundle.endpoint(t, receiver.URL(), nil)
	res := bundle.publish(t, events(4)...)
	holdID.Store(res[1].EventID)

	node := startNodeProcess(t, nodeOptions{URL: url, Name: "crash", Follower: true})
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the node process never sent the batch's second delivery")
	}
	node.Kill()
	first := bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
	require.Equal(t, 1, first.Attempts)

	// As in TestCrashBetweenSendAndRecord: the crash is made to have
	// happened long enough ago for River's rescuer.
	tag, err := bundle.pool.Exec(ctx, `UPDATE river_job SET attempted_at = now() - interval '3 minutes' WHERE state = 'running'`)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	startClient(t, bundle.pool, bundle.outbox, func(cfg *river.Config) { cfg.JobTimeout, cfg.RescueStuckJobsAfter = time.Second, time.Second })

	for _, r := range res {
		d := bundle.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
		require.Equal(t, 1, d.Attempts)
		require.Empty(t, bundle.ownJobs(t, d.ID), "the rescued batch job sent them itself")
	}
	require.Equal(t, map[string]int{res[0].EventID: 1, res[1].EventID: 2, res[2].EventID: 1, res[3].EventID: 1},
		receiver.byWebhookID(), "recorded once, the unrecorded one again, the rest once")
}

// rescueStuckJob makes the River job a killed node left running look to
// River's rescuer as old as it must be (as TestCrashBetweenSendAndRecord
// explains), starts a client of pool that becomes the leader and runs the
// rescuer, and waits until the job is in state (its next state: retried,
// discarded or cancelled).
func rescueStuckJob(t *testing.T, b *testBundle, kind, state string) {
	t.Helper()
	ctx := context.Background()
	tag, err := b.pool.Exec(ctx, `UPDATE river_job SET attempted_at = now() - interval '3 minutes' WHERE state = 'running'`)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	startClient(t, b.pool, b.outbox, func(cfg *river.Config) { cfg.JobTimeout, cfg.RescueStuckJobsAfter = time.Second, time.Second })
	require.Eventually(t, func() bool {
		var got string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT state FROM river_job WHERE kind = $1 ORDER BY id LIMIT 1`, kind).Scan(&got))
		return got == state
	}, awaitTimeout, 10*time.Millisecond, "River's rescuer never made the job %s", state)
}

// awaitSessionGone waits until no session of the test's database runs, or
// holds a transaction open after, the query named name (sqlc's "-- name:"
// comment): a killed node's session ends once the server notices.
func awaitSessionGone(t *testing.T, pool *pgxpool.Pool, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle' AND query LIKE '%' || $1 || '%'`,
			"name: "+name).Scan(&n))
		return n == 0
	}, awaitTimeout, 10*time.Millisecond, "a session still runs %s", name)
}

// A node killed in the last run River allows a batch job (it hands every
// delivery over: here, while it waits for a row the test holds): River
// discards the job, and its deliveries are left pending with no job until
// Rescue gives each a job of its own.
func TestCrashInTheLastRunOfABatch(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a subprocess")
	}
	ctx := context.Background()
	url := testdb.NewURL(t)
	bundle := openBundle(t, url, testConfig())
	receiver := okSink(t)
	ep := bundle.endpoint(t, receiver.URL(), nil)
	res := bundle.publish(t, events(4)...)
	_, err := bundle.pool.Exec(ctx, `UPDATE river_job SET max_attempts = 1 WHERE kind = $1`, outbox.DeliveryBatchKind)
	require.NoError(t, err)
	tx, err := bundle.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM wharf_outbox_deliveries WHERE id = $1 FOR UPDATE`, bundle.onlyDelivery(t, res[3].EventID).ID)
	require.NoError(t, err)

	node := startNodeProcess(t, nodeOptions{URL: url, Name: "crash", Follower: true})
	awaitLockWait(t, bundle.pool) // the last run's hand-over waits for the row
	node.Kill()
	require.NoError(t, tx.Rollback(ctx))
	awaitSessionGone(t, bundle.pool, "OutboxDeliveryHandOver")
	var dead deadLog
	n, err := rescuer(t, bundle.pool, &dead).Rescue(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "running, to River, until its rescuer finds it stuck: not stranded")
	rescueStuckJob(t, bundle, outbox.DeliveryBatchKind, "discarded")
	for _, r := range res {
		d := bundle.onlyDelivery(t, r.EventID)
		require.Equal(t, outbox.StatusPending, d.Status)
		require.Empty(t, bundle.ownJobs(t, d.ID), "the hand-over died with the node")
	}

	n, err = rescuer(t, bundle.pool, &dead).Rescue(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	for _, r := range res {
		d := bundle.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
		require.Equal(t, 1, d.Attempts)
		require.Equal(t, []outbox.DeliveryArgs{{DeliveryID: d.ID, Generation: 1}}, bundle.ownJobs(t, d.ID))
	}
	require.Len(t, receiver.all(), 4, "each sent once")
	require.Empty(t, dead.reasons())
}

// A node killed while a job of its own sends, then the job cancelled
// (JobCancel) or in the last run River allows it: River's rescuer
// cancels or discards the job, and Rescue dead-letters its delivery, as
// the job would have had its node lived.
func TestCrashThenJobOfItsOwnEnds(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs subprocesses")
	}
	for _, tc := range []struct{ name, state, reason string }{
		{"Cancelled", "cancelled", "cancelled"},
		{"LastRun", "discarded", "attempts exhausted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url := testdb.NewURL(t)
			bundle := openBundle(t, url, singleJobConfig())
			hold := make(chan struct{})
			t.Cleanup(func() { close(hold) })
			receiver := newSink(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
				select { // never answered before the node dies
				case <-hold:
				case <-r.Context().Done():
				}
			})
			ep := bundle.endpoint(t, receiver.URL(), nil)
			res := bundle.publish(t, events(1)...)
			d := bundle.onlyDelivery(t, res[0].EventID)
			jobID := bundle.ownJobIDs(t, d.ID)[0]
			if tc.state == "discarded" {
				_, err := bundle.pool.Exec(ctx, `UPDATE river_job SET max_attempts = 1 WHERE id = $1`, jobID)
				require.NoError(t, err)
			}

			node := startNodeProcess(t, nodeOptions{URL: url, Name: "crash", Config: "single", Follower: true})
			select {
			case <-receiver.arrived:
			case <-time.After(awaitTimeout):
				t.Fatal("the node process never sent the delivery")
			}
			node.Kill()
			if tc.state == "cancelled" {
				_, err := adminClient(t, bundle.pool).JobCancel(ctx, jobID)
				require.NoError(t, err)
			}
			rescueStuckJob(t, bundle, outbox.DeliveryKind, tc.state)
			require.Equal(t, outbox.StatusPending, bundle.onlyDelivery(t, res[0].EventID).Status, "no job will finish it")

			var dead deadLog
			n, err := rescuer(t, bundle.pool, &dead).Rescue(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			d = bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusDead)
			require.Contains(t, d.LastError, tc.reason)
			require.Equal(t, map[uuid.UUID]string{d.ID: d.LastError}, dead.reasons())
			require.Len(t, bundle.ownJobIDs(t, d.ID), 1, "no new job")
			require.Len(t, receiver.all(), 1)
		})
	}
}
