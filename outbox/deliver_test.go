package outbox_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/signature"
)

func TestDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("FailingThenSucceedingRecordsEveryAttempt", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		receiver := newSink(t, failFirst(2))
		ep := bundle.endpoint(t, receiver.URL(), nil)
		startRiver(t, bundle.pool, bundle.outbox)

		res := bundle.publish(t, &outbox.Event{Type: "x", Data: 1})
		d := bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		require.Equal(t, 3, d.Attempts)
		require.NotNil(t, d.SucceededAt)

		attempts, err := bundle.outbox.AttemptList(ctx, d.ID)
		require.NoError(t, err)
		require.Len(t, attempts, 3)
		for i, a := range attempts {
			require.Equal(t, i+1, a.Number)
			require.Equal(t, i == 2, a.Succeeded)
			require.Positive(t, a.Duration)
		}
		require.Equal(t, http.StatusInternalServerError, *attempts[0].StatusCode)
		require.JSONEq(t, `{"error":"try later"}`, string(attempts[0].ResponseBody))
		require.Equal(t, "answered 500", attempts[0].Error)
		require.Equal(t, http.StatusNoContent, *attempts[2].StatusCode)
		require.Equal(t, 3, receiver.byWebhookID()[res[0].EventID], "same webhook-id on every attempt")
		for _, r := range receiver.all() {
			require.NoError(t, r.verifyWith(ep.Secret), "each attempt is signed with its own timestamp")
		}

		health, err := bundle.outbox.EndpointGet(ctx, ep.ID)
		require.NoError(t, err)
		require.Zero(t, health.ConsecutiveFailures)
		require.Nil(t, health.FailingSince)
		require.NotNil(t, health.LastSuccessAt)
		require.NotNil(t, health.LastFailureAt)
	})

	t.Run("FailingForeverIsDeadThenReplayed", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		var healthy atomic.Bool
		receiver := newSink(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			if healthy.Load() {
				w.WriteHeader(http.StatusOK)
				return
			}
			w.WriteHeader(http.StatusBadGateway)
		})
		ep := bundle.endpoint(t, receiver.URL(), nil)
		startRiver(t, bundle.pool, bundle.outbox)

		res := bundle.publish(t, &outbox.Event{Type: "x"}, &outbox.Event{Type: "y"})
		first := bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusDead)
		second := bundle.awaitDelivery(t, ep.ID, res[1].EventID, outbox.StatusDead)
		require.Equal(t, 4, first.Attempts, "one attempt per schedule entry")
		require.Equal(t, http.StatusBadGateway, *first.LastStatusCode)
		require.Nil(t, first.NextAttemptAt)
		health, err := bundle.outbox.EndpointGet(ctx, ep.ID)
		require.NoError(t, err)
		require.True(t, health.Enabled)
		require.Equal(t, 8, health.ConsecutiveFailures)

		healthy.Store(true)
		require.NoError(t, bundle.outbox.DeliveryReplay(ctx, first.ID))
		replayed := bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		require.Equal(t, 5, replayed.Attempts)
		require.Equal(t, 5, receiver.byWebhookID()[res[0].EventID])
		require.ErrorIs(t, bundle.outbox.DeliveryReplay(ctx, uuid.New()), outbox.ErrNotFound)

		n, err := bundle.outbox.DeliveryReplayDead(ctx, ep.ID, time.Now().Add(-time.Hour))
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, 4, second.Attempts)
		bundle.awaitDelivery(t, ep.ID, res[1].EventID, outbox.StatusSucceeded)
	})

	t.Run("GoneDisablesEndpoint", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		receiver := newSink(t, status(http.StatusGone))
		ep := bundle.endpoint(t, receiver.URL(), nil)
		startRiver(t, bundle.pool, bundle.outbox)

		res := bundle.publish(t, &outbox.Event{Type: "x"})
		d := bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusDead)
		require.Equal(t, 1, d.Attempts, "410 is not retried")
		got, err := bundle.outbox.EndpointGet(ctx, ep.ID)
		require.NoError(t, err)
		require.False(t, got.Enabled)
		require.Contains(t, got.DisabledReason, "410")
		require.NotNil(t, got.DisabledAt)

		again := bundle.publish(t, &outbox.Event{Type: "x"})
		require.Zero(t, again[0].Deliveries, "a disabled endpoint gets no new deliveries")
		require.ErrorIs(t, bundle.outbox.DeliveryReplay(ctx, d.ID), outbox.ErrEndpointDisabled)
		_, err = bundle.outbox.DeliveryReplayDead(ctx, ep.ID, time.Time{})
		require.ErrorIs(t, err, outbox.ErrEndpointDisabled)
	})

	t.Run("RedirectIsAFailure", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		target := okSink(t)
		redirector := newSink(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL(), http.StatusFound)
		})
		ep := bundle.endpoint(t, redirector.URL(), nil)
		startRiver(t, bundle.pool, bundle.outbox)

		res := bundle.publish(t, &outbox.Event{Type: "x"})
		d := bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusDead)
		require.Equal(t, http.StatusFound, *d.LastStatusCode)
		require.Contains(t, d.LastError, "redirects are not followed")
		require.Len(t, redirector.all(), 4)
		require.Empty(t, target.all())
		require.Zero(t, target.conns.Load())
	})

	t.Run("ConcurrencyCapDefersWithoutFailing", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, singleJobConfig())
		release := make(chan struct{})
		slow := newSink(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusNoContent)
		})
		fast := okSink(t)
		slowEp := bundle.endpoint(t, slow.URL(), &outbox.EndpointParams{MaxInFlight: 2})
		fastEp := bundle.endpoint(t, fast.URL(), &outbox.EndpointParams{MaxInFlight: 2})
		startRiver(t, bundle.pool, bundle.outbox)

		events := make([]*outbox.Event, 6)
		for i := range events {
			events[i] = &outbox.Event{Type: "x", Data: i}
		}
		res := bundle.publish(t, events...)
		for _, r := range res {
			bundle.awaitDelivery(t, fastEp.ID, r.EventID, outbox.StatusSucceeded)
		}
		require.Eventually(t, func() bool { return slow.inFlight.Load() == 2 }, 5*time.Second, 5*time.Millisecond)
		require.Len(t, slow.all(), 2, "the slow endpoint's other deliveries wait")
		pending, err := bundle.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{EndpointID: &slowEp.ID, Status: outbox.StatusPending})
		require.NoError(t, err)
		require.Len(t, pending, 6, "deferred deliveries are not failures")

		close(release)
		for _, r := range res {
			d := bundle.awaitDelivery(t, slowEp.ID, r.EventID, outbox.StatusSucceeded)
			require.Equal(t, 1, d.Attempts)
		}
		require.Equal(t, int64(2), slow.maxSeen.Load())
		require.LessOrEqual(t, fast.maxSeen.Load(), int64(2))
	})

	t.Run("LoweredCapCountsEveryLiveLease", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, singleJobConfig())
		var (
			lowered   atomic.Bool
			worst     atomic.Int64 // most requests in flight as one started after the cap was lowered
			lateStart atomic.Int64 // requests started after the cap was lowered
			mu        sync.Mutex
			holds     = map[string]chan struct{}{}
			all       = make(chan struct{})
		)
		hold := func(id string) chan struct{} {
			mu.Lock()
			defer mu.Unlock()
			if holds[id] == nil {
				holds[id] = make(chan struct{})
			}
			return holds[id]
		}
		var slow *sink
		slow = newSink(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			if lowered.Load() {
				lateStart.Add(1)
				for n := slow.inFlight.Load(); ; {
					seen := worst.Load()
					if n <= seen || worst.CompareAndSwap(seen, n) {
						break
					}
				}
			}
			select {
			case <-hold(r.Header.Get("webhook-id")):
			case <-all:
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusNoContent)
		})
		ep := bundle.endpoint(t, slow.URL(), &outbox.EndpointParams{MaxInFlight: 4})
		startRiver(t, bundle.pool, bundle.outbox)
		t.Cleanup(func() {
			select {
			case <-all:
			default:
				close(all) // before River stops
			}
		})

		events := make([]*outbox.Event, 12)
		for i := range events {
			events[i] = &outbox.Event{Type: "x", Data: i}
		}
		res := bundle.publish(t, events...)
		require.Eventually(t, func() bool { return slow.inFlight.Load() == 4 }, 10*time.Second, 5*time.Millisecond)

		two := 2
		_, err := bundle.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{MaxInFlight: &two})
		require.NoError(t, err)
		lowered.Store(true)

		// Finish the two requests holding slots under the new cap: two
		// requests holding slots above it are still in flight, so nothing
		// may start.
		rows, err := bundle.pool.Query(ctx, `
			SELECT d.event_id FROM wharf_outbox_leases l JOIN wharf_outbox_deliveries d ON d.id = l.delivery_id
			WHERE l.endpoint_id = $1 AND l.slot < 2 AND l.expires_at > now()`, ep.ID)
		require.NoError(t, err)
		low, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		require.NoError(t, err)
		require.Len(t, low, 2)
		for _, id := range low {
			close(hold(outbox.EventIDPrefix + id.String()))
		}
		for _, id := range low {
			bundle.awaitDelivery(t, ep.ID, outbox.EventIDPrefix+id.String(), outbox.StatusSucceeded)
		}
		// Let waiting deliveries try for a slot now that those two are free.
		var freed time.Time
		require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT now()").Scan(&freed))
		require.Eventually(t, func() bool {
			var tried int
			require.NoError(t, bundle.pool.QueryRow(ctx,
				"SELECT count(*) FROM river_job WHERE attempted_at > $1", freed).Scan(&tried))
			return tried >= 3
		}, 10*time.Second, 5*time.Millisecond)

		close(all)
		for _, r := range res {
			d := bundle.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
			require.Equal(t, 1, d.Attempts)
		}
		require.Positive(t, lateStart.Load())
		require.LessOrEqual(t, worst.Load(), int64(2), "a request started while the new cap's worth of requests was in flight")
	})

	t.Run("RetryAfterAndThrottlingStretchTheWait", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.ThrottledRetryMin = time.Minute
		cfg.RetryAfterMax = 2 * time.Hour
		bundle := setup(t, cfg)
		header := func(code int, retryAfter string) func(int, http.ResponseWriter, *http.Request) {
			return func(_ int, w http.ResponseWriter, _ *http.Request) {
				if retryAfter != "" {
					w.Header().Set("Retry-After", retryAfter)
				}
				w.WriteHeader(code)
			}
		}
		// The last case retries after 10 ms: its second request is held
		// until the test ends, so that its first attempt's record stays
		// there to be read.
		release := make(chan struct{})
		thenHold := func(first func(int, http.ResponseWriter, *http.Request)) func(int, http.ResponseWriter, *http.Request) {
			return func(n int, w http.ResponseWriter, r *http.Request) {
				if n > 1 {
					select {
					case <-release:
					case <-r.Context().Done():
					}
				}
				first(n, w, r)
			}
		}
		cases := []struct {
			sink *sink
			wait time.Duration
		}{
			{newSink(t, header(http.StatusServiceUnavailable, "120")), 120 * time.Second},
			{newSink(t, header(http.StatusTooManyRequests, "")), time.Minute},
			{newSink(t, header(http.StatusTooManyRequests, "86400")), 2 * time.Hour},
			{newSink(t, thenHold(header(http.StatusInternalServerError, "600"))), 10 * time.Millisecond},
		}
		endpoints := make([]*outbox.EndpointWithSecret, len(cases))
		for i, c := range cases {
			endpoints[i] = bundle.endpoint(t, c.sink.URL(), nil)
		}
		startRiver(t, bundle.pool, bundle.outbox)
		t.Cleanup(func() { close(release) }) // before River stops

		res := bundle.publish(t, &outbox.Event{Type: "x"})
		for i, c := range cases {
			d := bundle.awaitDelivery(t, endpoints[i].ID, res[0].EventID, outbox.StatusRetrying)
			require.Equal(t, 1, d.Attempts)
			require.NotNil(t, d.NextAttemptAt)
			wait := d.NextAttemptAt.Sub(d.UpdatedAt)
			require.InDelta(t, c.wait.Seconds(), wait.Seconds(), 1, "case %d waits %s", i, wait)
		}
		require.Eventually(t, func() bool {
			var scheduled int
			require.NoError(t, bundle.pool.QueryRow(ctx,
				`SELECT count(*) FROM river_job WHERE state = 'retryable' AND scheduled_at > now() + interval '50 seconds'`).Scan(&scheduled))
			return scheduled == 3
		}, 5*time.Second, 10*time.Millisecond, "River schedules the stretched retries")
	})

	t.Run("RotationSendsBothSignaturesDuringOverlap", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		receiver := okSink(t)
		ep := bundle.endpoint(t, receiver.URL(), nil)
		rotated, err := bundle.outbox.EndpointRotateSecret(ctx, ep.ID, nil)
		require.NoError(t, err)
		require.NotEqual(t, ep.Secret, rotated.Secret)
		startRiver(t, bundle.pool, bundle.outbox)

		res := bundle.publish(t, &outbox.Event{Type: "x"})
		bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		got := receiver.all()[0]
		require.Len(t, strings.Fields(got.Header.Get("webhook-signature")), 2)
		for _, secret := range []string{ep.Secret, rotated.Secret} {
			require.NoError(t, got.verifyWith(secret))
		}

		final, err := bundle.outbox.EndpointRotateSecret(ctx, ep.ID, &outbox.RotateSecretParams{Overlap: -1})
		require.NoError(t, err)
		res = bundle.publish(t, &outbox.Event{Type: "x"})
		bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		got = receiver.all()[1]
		require.Len(t, strings.Fields(got.Header.Get("webhook-signature")), 1)
		require.NoError(t, got.verifyWith(final.Secret))
		require.ErrorIs(t, got.verifyWith(rotated.Secret), signature.ErrNoMatch)
	})

	t.Run("ContinuousFailureDisablesEndpoint", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		var offset atomic.Int64
		cfg.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
		bundle := setup(t, cfg)
		receiver := newSink(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 2 {
				offset.Store(int64(outbox.DefaultDisableAfter + time.Hour))
			}
			w.WriteHeader(http.StatusInternalServerError)
		})
		ep := bundle.endpoint(t, receiver.URL(), nil)
		startRiver(t, bundle.pool, bundle.outbox)

		res := bundle.publish(t, &outbox.Event{Type: "x"})
		d := bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusDead)
		require.Equal(t, 2, d.Attempts)
		require.Equal(t, "endpoint disabled", d.LastError)
		got, err := bundle.outbox.EndpointGet(ctx, ep.ID)
		require.NoError(t, err)
		require.False(t, got.Enabled)
		require.Contains(t, got.DisabledReason, "every attempt failed for longer")
		require.Equal(t, 2, got.ConsecutiveFailures)

		enabled, err := bundle.outbox.EndpointEnable(ctx, ep.ID)
		require.NoError(t, err)
		require.True(t, enabled.Enabled)
		require.Zero(t, enabled.ConsecutiveFailures)
		require.Nil(t, enabled.FailingSince)
	})

	t.Run("OrderedEndpointDeliversInOrderPerKey", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		var firstID atomic.Value
		firstID.Store("")
		var firstFailures atomic.Int64
		receiver := newSink(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("webhook-id") == firstID.Load() && firstFailures.Add(1) <= 2 {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
		ep := bundle.endpoint(t, receiver.URL(), &outbox.EndpointParams{Ordered: true})

		res := bundle.publish(t,
			&outbox.Event{Type: "x", OrderingKey: "account-1", Data: 1},
			&outbox.Event{Type: "x", OrderingKey: "account-1", Data: 2},
			&outbox.Event{Type: "x", OrderingKey: "account-1", Data: 3},
		)
		firstID.Store(res[0].EventID)
		startRiver(t, bundle.pool, bundle.outbox)
		for _, r := range res {
			bundle.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
		}

		var order []string
		for _, r := range receiver.all() {
			id := r.Header.Get("webhook-id")
			if len(order) == 0 || order[len(order)-1] != id {
				order = append(order, id)
			}
		}
		require.Equal(t, []string{res[0].EventID, res[1].EventID, res[2].EventID}, order,
			"each event is sent only after the one before it succeeded")
	})
}

// A retry the schedule says is due at once goes at once. Work decided the
// retry's time, and River compares it with its clock read after Work
// returned: a time decided as "now" was already past, and River used its
// own policy instead (1 s, then 16 s, then 81 s…). Three attempts with no
// wait between them now end long before River's policy would have made
// the third.
func TestZeroRetryWaitRetriesAtOnce(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.RetrySchedule = []time.Duration{0, 0, 0}
	b := setup(t, cfg)
	failing := newSink(t, status(http.StatusServiceUnavailable))
	ep := b.endpoint(t, failing.URL(), nil)
	res := b.publish(t, &outbox.Event{Type: "x"})
	startRiver(t, b.pool, b.outbox)
	require.Eventually(t, func() bool {
		list, err := b.outbox.DeliveryList(context.Background(), &outbox.DeliveryListParams{EndpointID: &ep.ID, EventID: res[0].EventID})
		require.NoError(t, err)
		return len(list) == 1 && list[0].Status == outbox.StatusDead && list[0].Attempts == 3
	}, 12*time.Second, 10*time.Millisecond, "three attempts 0 s apart take 17 s under River's own retry policy")
}

// TestAtCapWaitsForAFreedSlot: deliveries that find their endpoint at its
// cap take a slot as soon as an attempt of this node gives one back,
// instead of being snoozed for BusyRetryDelay (30 s here): a burst to an
// endpoint that answers in milliseconds is delivered in milliseconds, and
// the cap still holds. Before, the two deliveries past the cap waited out
// their snooze.
func TestAtCapWaitsForAFreedSlot(t *testing.T) {
	t.Parallel()
	cfg := singleJobConfig()
	cfg.BusyRetryDelay = 30 * time.Second
	bundle := setup(t, cfg)
	receiver := newSink(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		time.Sleep(20 * time.Millisecond) // the endpoint's answer takes a while, so the slots overlap
		w.WriteHeader(http.StatusNoContent)
	})
	ep := bundle.endpoint(t, receiver.URL(), &outbox.EndpointParams{MaxInFlight: 2})
	events := make([]*outbox.Event, 4)
	for i := range events {
		events[i] = &outbox.Event{Type: "x", Data: i}
	}
	res := bundle.publish(t, events...)
	started := time.Now()
	startRiver(t, bundle.pool, bundle.outbox)
	for _, r := range res {
		d := bundle.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
		require.Equal(t, 1, d.Attempts)
	}
	require.Less(t, time.Since(started), cfg.BusyRetryDelay, "no delivery waited out a snooze")
	require.LessOrEqual(t, receiver.maxSeen.Load(), int64(2))
}
