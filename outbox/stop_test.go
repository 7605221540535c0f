package outbox_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/signature"
)

// A request cut off by the River client's stop (the job's context ends
// while it is in flight) is an attempt: the receiver may have got it. It
// is recorded, with its error, and counts toward the delivery's attempts,
// but is no verdict on the endpoint. The delivery goes on after the
// restart.
func TestStopMidRequestRecordsTheAttempt(t *testing.T) {
	t.Parallel()
	t.Run("OwnJob", func(t *testing.T) { t.Parallel(); testStopMidRequest(t, singleJobConfig(), 1) })
	t.Run("Batch", func(t *testing.T) { t.Parallel(); testStopMidRequest(t, testConfig(), 3) })
	// On the last attempt the schedule allows, a cut-off made the delivery
	// dead (found in review): a deploy is no verdict on the endpoint.
	lastAttempt := func(cfg *outbox.Config) *outbox.Config {
		cfg.RetrySchedule = []time.Duration{0}
		return cfg
	}
	t.Run("OwnJobLastAttempt", func(t *testing.T) { t.Parallel(); testStopMidRequest(t, lastAttempt(singleJobConfig()), 1) })
	t.Run("BatchLastAttempt", func(t *testing.T) { t.Parallel(); testStopMidRequest(t, lastAttempt(testConfig()), 3) })
}

func testStopMidRequest(t *testing.T, cfg *outbox.Config, n int) {
	ctx := context.Background()
	b := setup(t, cfg)
	var held atomic.Value // the webhook-id of the request held until the stop
	held.Store("")
	receiver := newSink(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		if held.CompareAndSwap("", r.Header.Get(signature.HeaderWebhookID)) {
			<-r.Context().Done() // the sender gives up first
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	ep := b.endpoint(t, receiver.URL(), nil)
	res := b.publish(t, events(n)...)
	client := startRiver(t, b.pool, b.outbox)
	select {
	case <-receiver.arrived:
	case <-time.After(awaitTimeout):
		t.Fatal("no delivery was attempted")
	}
	stopCtx, cancel := context.WithTimeout(ctx, awaitTimeout)
	defer cancel()
	require.NoError(t, client.StopAndCancel(stopCtx))

	cutOff := b.onlyDelivery(t, held.Load().(string))
	require.Equal(t, 1, cutOff.Attempts, "the request cut off is an attempt")
	require.Equal(t, outbox.StatusRetrying, cutOff.Status)
	require.Contains(t, cutOff.LastError, "cut off by shutdown")
	attempts, err := b.outbox.AttemptList(ctx, cutOff.ID)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Contains(t, attempts[0].Error, "cut off by shutdown")
	got, err := b.outbox.EndpointGet(ctx, ep.ID)
	require.NoError(t, err)
	require.Zero(t, got.ConsecutiveFailures, "no verdict on the endpoint")
	for _, r := range res {
		if r.EventID != cutOff.EventID {
			require.Zero(t, b.onlyDelivery(t, r.EventID).Attempts, "never sent")
		}
	}

	startRiver(t, b.pool, b.outbox)
	for _, r := range res {
		d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
		if r.EventID == cutOff.EventID {
			require.Equal(t, 2, d.Attempts, "the cut-off attempt and the one after the restart")
			continue
		}
		require.Equal(t, 1, d.Attempts)
	}
	require.Equal(t, 2, receiver.byWebhookID()[cutOff.EventID])
	require.Len(t, receiver.all(), n+1)
}
