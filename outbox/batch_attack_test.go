package outbox_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/signature"
)

// Attacks on the batch path: what happens around a batch job while it
// sends (deletion, another job's verdict on the endpoint, replays, two
// nodes sharing a cap, a stop past its first span).
func TestBatchUnderAttack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("EndpointDeletedMidBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		var epID atomic.Value
		deleted := make(chan error, 1)
		receiver := newSink(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 3 {
				deleted <- b.outbox.EndpointDelete(ctx, epID.Load().(*outbox.EndpointWithSecret).ID)
			}
			w.WriteHeader(http.StatusNoContent)
		})
		ep := b.endpoint(t, receiver.URL(), nil)
		epID.Store(ep)
		b.publish(t, events(16)...)
		startRiver(t, b.pool, b.outbox)
		select {
		case err := <-deleted:
			require.NoError(t, err)
		case <-time.After(awaitTimeout):
			t.Fatal("the batch never reached its third delivery")
		}
		require.Eventually(t, func() bool {
			jobs := b.outboxJobs(t)
			return len(jobs) == 1 && jobs[0].state == "completed"
		}, awaitTimeout, 10*time.Millisecond, "the batch job completes, and hands nothing on")
		require.Len(t, receiver.all(), 3, "nothing is sent after the deletion")
	})

	t.Run("AnotherJobsGoneAnswerStopsTheBatch", func(t *testing.T) {
		t.Parallel()
		// While the batch's third request is at the receiver, a job of
		// its own (an event with an ordering key) to the same endpoint is
		// answered 410, which disables the endpoint: the batch's next
		// record must see it, and send nothing more.
		b := setup(t, testConfig())
		var other atomic.Value // the webhook-id answered 410
		other.Store("")
		var epID atomic.Value
		var disabledErr atomic.Value
		receiver := newSink(t, func(n int, w http.ResponseWriter, r *http.Request) {
			if r.Header.Get(signature.HeaderWebhookID) == other.Load() {
				w.WriteHeader(http.StatusGone)
				return
			}
			if n == 3 {
				res, err := b.outboxPublish(ctx, &outbox.Event{Type: "batch.event", OrderingKey: "k"})
				if err == nil {
					other.Store(res.EventID)
					err = awaitDisabled(b, epID.Load().(*outbox.EndpointWithSecret))
				}
				if err != nil {
					disabledErr.Store(err)
				}
			}
			w.WriteHeader(http.StatusNoContent)
		})
		ep := b.endpoint(t, receiver.URL(), nil)
		epID.Store(ep)
		res := b.publish(t, events(16)...)
		startRiver(t, b.pool, b.outbox)
		for i, r := range res {
			d := b.awaitFinished(t, r.EventID)
			require.Nil(t, disabledErr.Load())
			if i < 3 {
				require.Equal(t, outbox.StatusSucceeded, d.Status)
				continue
			}
			require.Equal(t, outbox.StatusDead, d.Status, "the endpoint was disabled: not sent")
			require.Zero(t, d.Attempts)
		}
		require.Len(t, receiver.all(), 4, "three of the batch and the one answered 410")
	})

	t.Run("ReplaysDuringABatch", func(t *testing.T) {
		t.Parallel()
		// At the third request: the first (succeeded) is replayed, the
		// third (in flight) and the fourth (not reached) are refused.
		b := setup(t, testConfig())
		var res []*outbox.PublishResult
		type refusals struct{ replayFirst, inFlight, notReached error }
		got := make(chan refusals, 1)
		receiver := newSink(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 3 {
				replay := func(i int) error {
					d, err := b.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{EventID: res[i].EventID})
					if err != nil {
						return err
					}
					return b.outbox.DeliveryReplay(ctx, d[0].ID)
				}
				got <- refusals{replay(0), replay(2), replay(3)}
			}
			w.WriteHeader(http.StatusNoContent)
		})
		ep := b.endpoint(t, receiver.URL(), nil)
		res = b.publish(t, events(6)...)
		startRiver(t, b.pool, b.outbox)
		var r refusals
		select {
		case r = <-got:
		case <-time.After(awaitTimeout):
			t.Fatal("the batch never reached its third delivery")
		}
		require.NoError(t, r.replayFirst, "a succeeded delivery replays")
		require.ErrorIs(t, r.inFlight, outbox.ErrDeliveryInProgress)
		require.ErrorIs(t, r.notReached, outbox.ErrDeliveryInProgress)
		for _, p := range res {
			d := b.awaitDelivery(t, ep.ID, p.EventID, outbox.StatusSucceeded)
			if p.EventID == res[0].EventID {
				require.Equal(t, 2, d.Attempts)
				continue
			}
			require.Equal(t, 1, d.Attempts)
		}
		require.Eventually(t, func() bool { return len(receiver.all()) == 7 }, awaitTimeout, 10*time.Millisecond)
		counts := receiver.byWebhookID()
		for i, p := range res {
			require.Equal(t, 1+min(1, max(1-i, 0)), counts[p.EventID], "the replayed one twice, the rest once")
		}
	})

	t.Run("CapLoweredAcrossTwoNodes", func(t *testing.T) {
		t.Parallel()
		url := testdb.NewURL(t)
		b := openBundle(t, url, testConfig())
		require.EqualValues(t, 1, capLowered(t, b, &outbox.EndpointParams{MaxInFlight: 4}, func() {
			startNode(t, url, "a", testConfig())
			startNode(t, url, "b", testConfig())
		}), "no request starts while the new cap's worth are in flight")
	})

	t.Run("LeaseExtensionAcrossTwoNodes", func(t *testing.T) {
		t.Parallel()
		// A cap of 1, two batch jobs on two nodes, every request longer
		// than the span: the batch holding the slot extends it span after
		// span, the other waits; never two requests at once.
		url := testdb.NewURL(t)
		cfg := testConfig()
		cfg.DeliveryBatchSpan = 100 * time.Millisecond
		b := openBundle(t, url, cfg)
		receiver := newSink(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			time.Sleep(150 * time.Millisecond)
			w.WriteHeader(http.StatusNoContent)
		})
		ep := b.endpoint(t, receiver.URL(), &outbox.EndpointParams{MaxInFlight: 1})
		res := append(b.publish(t, events(5)...), b.publish(t, events(5)...)...)
		require.Len(t, b.outboxJobs(t), 2)
		startNode(t, url, "a", cfg)
		startNode(t, url, "b", cfg)
		for _, r := range res {
			d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
			require.Equal(t, 1, d.Attempts)
		}
		require.EqualValues(t, 1, receiver.maxSeen.Load())
		require.Len(t, receiver.all(), 10)
	})

	t.Run("RemoteCancelFromAnotherNode", func(t *testing.T) {
		t.Parallel()
		// The batch runs on node a; JobCancel comes from another client
		// (an operator's): node a dead-letters what is still the job's.
		url := testdb.NewURL(t)
		b := openBundle(t, url, testConfig())
		receiver := newSink(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // answers only once the sender gives up
		})
		ep := b.endpoint(t, receiver.URL(), nil)
		res := b.publish(t, events(3)...)
		startNode(t, url, "a", testConfig())
		select {
		case <-receiver.arrived:
		case <-time.After(awaitTimeout):
			t.Fatal("no delivery was attempted")
		}
		var jobID int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT id FROM river_job WHERE kind = $1`, outbox.DeliveryBatchKind).Scan(&jobID))
		_, err := adminClient(t, b.pool).JobCancel(ctx, jobID)
		require.NoError(t, err)
		for i, r := range res {
			d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusDead)
			require.Contains(t, d.LastError, "cancelled")
			require.Equal(t, max(1-i, 0), d.Attempts)
		}
		require.Len(t, receiver.all(), 1)
		var live int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM wharf_outbox_leases WHERE endpoint_id = $1 AND expires_at > now()`,
			ep.ID).Scan(&live))
		require.Zero(t, live)
	})

	t.Run("StopPastTheFirstSpanAtTheCap", func(t *testing.T) {
		t.Parallel()
		// A cap of 1, which the batch holds past its first span (its
		// lease extended): a stop then records the request in flight and
		// gives the slot back; the restart sends the rest once each.
		cfg := testConfig()
		cfg.DeliveryBatchSpan = 100 * time.Millisecond
		b := setup(t, cfg)
		var held atomic.Value
		held.Store("")
		receiver := newSink(t, func(n int, w http.ResponseWriter, r *http.Request) {
			if n == 3 && held.CompareAndSwap("", r.Header.Get(signature.HeaderWebhookID)) {
				<-r.Context().Done()
				return
			}
			time.Sleep(150 * time.Millisecond) // past the span
			w.WriteHeader(http.StatusNoContent)
		})
		ep := b.endpoint(t, receiver.URL(), &outbox.EndpointParams{MaxInFlight: 1})
		res := b.publish(t, events(6)...)
		client := startRiver(t, b.pool, b.outbox)
		require.Eventually(t, func() bool { return held.Load() != "" }, awaitTimeout, 5*time.Millisecond)
		stopCtx, cancel := context.WithTimeout(ctx, awaitTimeout)
		defer cancel()
		require.NoError(t, client.StopAndCancel(stopCtx))
		var live int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM wharf_outbox_leases WHERE endpoint_id = $1 AND expires_at > now()`,
			ep.ID).Scan(&live))
		require.Zero(t, live, "the slot is given back")
		cut := b.onlyDelivery(t, held.Load().(string))
		require.Equal(t, 1, cut.Attempts)
		require.Contains(t, cut.LastError, "cut off by shutdown")

		startRiver(t, b.pool, b.outbox)
		for _, r := range res {
			d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
			if r.EventID == cut.EventID {
				require.Equal(t, 2, d.Attempts)
				continue
			}
			require.Equal(t, 1, d.Attempts)
		}
		require.Len(t, receiver.all(), 7, "the cut-off one twice, the rest once")
		require.EqualValues(t, 1, receiver.maxSeen.Load())
	})
}

// outboxPublish publishes event in a transaction of its own.
func (b *testBundle) outboxPublish(ctx context.Context, event *outbox.Event) (*outbox.PublishResult, error) {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	res, err := b.outbox.PublishTx(ctx, tx, event)
	if err != nil {
		return nil, err
	}
	return res, tx.Commit(ctx)
}

// awaitDisabled waits until ep is disabled.
func awaitDisabled(b *testBundle, ep *outbox.EndpointWithSecret) error {
	deadline := time.Now().Add(awaitTimeout)
	for time.Now().Before(deadline) {
		got, err := b.outbox.EndpointGet(context.Background(), ep.ID)
		if err != nil || !got.Enabled {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	return context.DeadlineExceeded
}

// capLowered publishes 64 events as four batch jobs to an endpoint made
// with params, starts the workers (start), and lowers the endpoint's cap
// to 1 while each job's first request is at the receiver; it returns the
// most requests in flight at once that the receiver saw start after the
// change.
func capLowered(t *testing.T, b *testBundle, params *outbox.EndpointParams, start func()) int64 {
	t.Helper()
	ctx := context.Background()
	gate := make(chan struct{})
	var changed atomic.Bool
	var mostAfter atomic.Int64
	var receiver *sink
	var once sync.Once
	receiver = newSink(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		if !changed.Load() {
			<-gate
		} else {
			raise(&mostAfter, receiver.inFlight.Load())
		}
		time.Sleep(5 * time.Millisecond) // long enough for requests to overlap
		w.WriteHeader(http.StatusNoContent)
	})
	t.Cleanup(func() { once.Do(func() { close(gate) }) })
	ep := b.endpoint(t, receiver.URL(), params)
	res := b.publish(t, events(64)...)
	require.Len(t, b.outboxJobs(t), 4)
	start()
	require.Eventually(t, func() bool { return receiver.inFlight.Load() == 4 }, awaitTimeout, time.Millisecond,
		"each batch job sends its first request")
	_, err := b.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{MaxInFlight: ptr(1)})
	require.NoError(t, err)
	changed.Store(true)
	once.Do(func() { close(gate) })
	for _, r := range res {
		d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
		require.Equal(t, 1, d.Attempts)
	}
	require.Len(t, receiver.all(), 64)
	return mostAfter.Load()
}
