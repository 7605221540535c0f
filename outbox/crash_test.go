package outbox_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

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
