package outbox_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/signature"
)

// A batch job notices a change of its endpoint before its next request and
// hands the rest on: each change below is made while the batch's third
// request is at the receiver, and what the receiver gets after it is
// counted.
func TestBatchHeedsEndpointChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// changeAtThird publishes 16 events as one batch job to an endpoint
	// made with params, whose sink (respond answers each request) makes
	// change while the third request is in flight, before answering it.
	// It returns the endpoint and the events, and the requests the sink
	// got after the change, once every delivery is status.
	type run struct {
		b     *testBundle
		ep    *outbox.EndpointWithSecret
		res   []*outbox.PublishResult
		after func() []received // what the sink got after the change
	}
	changeAtThird := func(t *testing.T, change func(b *testBundle, id uuid.UUID) error) *run {
		r := &run{b: setup(t, testConfig())}
		var mu sync.Mutex
		var changedAt time.Time
		var changeErr error
		var epID atomic.Value
		receiver := newSink(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 3 {
				err := change(r.b, epID.Load().(uuid.UUID))
				mu.Lock()
				changedAt, changeErr = time.Now(), err
				mu.Unlock()
			}
			w.WriteHeader(http.StatusNoContent)
		})
		r.ep = r.b.endpoint(t, receiver.URL(), nil)
		epID.Store(r.ep.ID)
		r.res = r.b.publish(t, events(16)...)
		require.Len(t, r.b.outboxJobs(t), 1, "one batch job")
		startRiver(t, r.b.pool, r.b.outbox)
		r.after = func() []received {
			mu.Lock()
			defer mu.Unlock()
			require.NoError(t, changeErr)
			require.False(t, changedAt.IsZero(), "the change was made")
			var out []received
			for _, req := range receiver.all() {
				if req.At.After(changedAt) {
					out = append(out, req)
				}
			}
			return out
		}
		return r
	}
	update := func(params *outbox.EndpointUpdateParams) func(*testBundle, uuid.UUID) error {
		return func(b *testBundle, id uuid.UUID) error {
			_, err := b.outbox.EndpointUpdate(ctx, id, params)
			return err
		}
	}

	t.Run("Disable", func(t *testing.T) {
		t.Parallel()
		r := changeAtThird(t, func(b *testBundle, id uuid.UUID) error {
			_, err := b.outbox.EndpointDisable(ctx, id, "")
			return err
		})
		for i, p := range r.res {
			d := r.b.awaitFinished(t, p.EventID)
			if i < 3 {
				require.Equal(t, outbox.StatusSucceeded, d.Status)
				continue
			}
			require.Equal(t, outbox.StatusDead, d.Status, "dead-lettered, not sent")
			require.Zero(t, d.Attempts)
			require.Contains(t, d.LastError, "disabled")
		}
		require.Zero(t, len(r.after()), "nothing reaches a disabled endpoint")
	})

	t.Run("URL", func(t *testing.T) {
		t.Parallel()
		moved := okSink(t)
		r := changeAtThird(t, update(&outbox.EndpointUpdateParams{URL: ptr(moved.URL())}))
		for _, p := range r.res {
			r.b.awaitDelivery(t, r.ep.ID, p.EventID, outbox.StatusSucceeded)
		}
		require.Zero(t, len(r.after()), "nothing goes to the old URL")
		require.Len(t, moved.all(), 13)
	})

	t.Run("SecretRotationDroppingTheOld", func(t *testing.T) {
		t.Parallel()
		var rotated atomic.Value
		r := changeAtThird(t, func(b *testBundle, id uuid.UUID) error {
			next, err := b.outbox.EndpointRotateSecret(ctx, id, &outbox.RotateSecretParams{Overlap: -1})
			if err == nil {
				rotated.Store(next.Secret)
			}
			return err
		})
		for _, p := range r.res {
			r.b.awaitDelivery(t, r.ep.ID, p.EventID, outbox.StatusSucceeded)
		}
		after := r.after()
		require.Len(t, after, 13)
		for _, req := range after {
			require.NoError(t, req.verifyWith(rotated.Load().(string)), "signed with the new secret")
			require.ErrorIs(t, req.verifyWith(r.ep.Secret), signature.ErrNoMatch, "the old one was dropped")
		}
	})

	t.Run("RateLimitSet", func(t *testing.T) {
		t.Parallel()
		r := changeAtThird(t, update(&outbox.EndpointUpdateParams{RateLimit: &outbox.RateLimit{PerSecond: 2, Burst: 1}}))
		for _, p := range r.res {
			r.b.awaitDelivery(t, r.ep.ID, p.EventID, outbox.StatusSucceeded)
		}
		var at []time.Time
		for _, req := range r.after() {
			at = append(at, req.At)
		}
		require.Len(t, at, 13)
		require.LessOrEqual(t, maxPerSecond(at), 3, "2 a second, one at a time: %v ms", offsets(at))
	})

	capChange := func(t *testing.T, params *outbox.EndpointParams) int64 {
		b := setup(t, testConfig())
		return capLowered(t, b, params, func() { startRiver(t, b.pool, b.outbox) })
	}

	t.Run("CapLowered", func(t *testing.T) {
		t.Parallel()
		require.EqualValues(t, 1, capChange(t, &outbox.EndpointParams{MaxInFlight: 4}),
			"no request starts while the new cap's worth are in flight")
	})

	t.Run("CapSetFromNone", func(t *testing.T) {
		t.Parallel()
		require.EqualValues(t, 1, capChange(t, &outbox.EndpointParams{MaxInFlight: outbox.NoMaxInFlight}),
			"no request starts while the new cap's worth are in flight")
	})
}

// raise sets v to n if n is larger.
func raise(v *atomic.Int64, n int64) {
	for {
		old := v.Load()
		if n <= old || v.CompareAndSwap(old, n) {
			return
		}
	}
}

// awaitFinished waits until the delivery of eventID has succeeded or is
// dead, and returns it.
func (b *testBundle) awaitFinished(t *testing.T, eventID string) *outbox.Delivery {
	t.Helper()
	var d *outbox.Delivery
	require.Eventually(t, func() bool {
		d = b.onlyDelivery(t, eventID)
		return d.Status == outbox.StatusSucceeded || d.Status == outbox.StatusDead
	}, awaitTimeout, 10*time.Millisecond, "delivery of %s never finished", eventID)
	return d
}
