package outbox_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
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
