package outbox_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/signature"
)

// jobOf is a River job of a delivery as the tests read it.
type jobOf struct {
	kind, state string
	args        json.RawMessage
}

// outboxJobs returns the outbox's River jobs, oldest first.
func (b *testBundle) outboxJobs(t *testing.T) []jobOf {
	t.Helper()
	rows, err := b.pool.Query(context.Background(),
		`SELECT kind, state, args FROM river_job WHERE kind IN ($1, $2) ORDER BY id`,
		outbox.DeliveryKind, outbox.DeliveryBatchKind)
	require.NoError(t, err)
	defer rows.Close()
	var jobs []jobOf
	for rows.Next() {
		var j jobOf
		require.NoError(t, rows.Scan(&j.kind, &j.state, &j.args))
		jobs = append(jobs, j)
	}
	require.NoError(t, rows.Err())
	return jobs
}

// ownJobs returns the args of the jobs of their own (DeliveryArgs) of
// delivery id.
func (b *testBundle) ownJobs(t *testing.T, id uuid.UUID) []outbox.DeliveryArgs {
	t.Helper()
	var out []outbox.DeliveryArgs
	for _, j := range b.outboxJobs(t) {
		if j.kind != outbox.DeliveryKind {
			continue
		}
		var args outbox.DeliveryArgs
		require.NoError(t, json.Unmarshal(j.args, &args))
		if args.DeliveryID == id {
			out = append(out, args)
		}
	}
	return out
}

// spanSplit publishes n events as one batch job to an endpoint made with
// params, whose sink answers request number k (from 1) after span, the
// batch's, when slow(k), and returns how many deliveries each batch job the
// run made held, in the order they were made. Each delivery must succeed
// with one attempt, made by a batch job, and each webhook be received
// once.
func spanSplit(t *testing.T, span time.Duration, params *outbox.EndpointParams, n int, slow func(int) bool) []int {
	t.Helper()
	cfg := testConfig()
	cfg.DeliveryBatchSpan = span
	b := setup(t, cfg)
	receiver := newSink(t, func(k int, w http.ResponseWriter, _ *http.Request) {
		if slow(k) {
			time.Sleep(span + span/4)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	ep := b.endpoint(t, receiver.URL(), params)
	res := b.publish(t, events(n)...)
	require.Len(t, b.outboxJobs(t), 1, "one batch job")
	startRiver(t, b.pool, b.outbox)

	for _, r := range res {
		d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
		require.Equal(t, 1, d.Attempts)
		require.Empty(t, b.ownJobs(t, d.ID))
	}
	for id, k := range receiver.byWebhookID() {
		require.Equal(t, 1, k, id)
	}
	require.Len(t, receiver.all(), n)
	var sizes []int
	for i, j := range b.outboxJobs(t) {
		require.Equal(t, outbox.DeliveryBatchKind, j.kind)
		var args outbox.DeliveryBatchArgs
		require.NoError(t, json.Unmarshal(j.args, &args))
		require.Equal(t, ep.ID, args.EndpointID)
		for _, ref := range args.Deliveries {
			if i == 0 {
				require.Zero(t, ref.Generation)
			} else {
				require.Positive(t, ref.Generation, "handed over")
			}
			require.Zero(t, ref.AttemptsBefore)
		}
		sizes = append(sizes, len(args.Deliveries))
	}
	return sizes
}

func events(n int) []*outbox.Event {
	out := make([]*outbox.Event, n)
	for i := range out {
		out[i] = &outbox.Event{Type: "batch.event", Data: map[string]int{"i": i}}
	}
	return out
}

// byEvent answers each event's requests with respond(event index, how
// many requests of that event came before).
func byEvent(res *[]*outbox.PublishResult, respond func(event, before int) int) func(int, http.ResponseWriter, *http.Request) {
	var mu sync.Mutex
	seen := map[string]int{}
	return func(_ int, w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(signature.HeaderWebhookID)
		mu.Lock()
		before := seen[id]
		seen[id]++
		event := slices.IndexFunc(*res, func(p *outbox.PublishResult) bool { return p.EventID == id })
		mu.Unlock()
		w.WriteHeader(respond(event, before))
	}
}

func TestBatchJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("DeliversEventsPublishedTogetherInOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		receiver := okSink(t)
		ep := b.endpoint(t, receiver.URL(), nil)
		res := b.publish(t, events(40)...)

		jobs := b.outboxJobs(t)
		require.Len(t, jobs, 3, "one batch of 64 at most, spread over the jobs the cap of 10 allows, a job per 16 at most")
		var batches [][]outbox.DeliveryRef
		for _, j := range jobs {
			require.Equal(t, outbox.DeliveryBatchKind, j.kind)
			var args outbox.DeliveryBatchArgs
			require.NoError(t, json.Unmarshal(j.args, &args))
			require.Equal(t, ep.ID, args.EndpointID)
			batches = append(batches, args.Deliveries)
		}
		require.Equal(t, []int{14, 13, 13}, []int{len(batches[0]), len(batches[1]), len(batches[2])})

		startRiver(t, b.pool, b.outbox)
		eventOf := map[uuid.UUID]string{}
		for _, r := range res {
			d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
			require.Equal(t, 1, d.Attempts)
			eventOf[d.ID] = r.EventID
		}
		require.Len(t, receiver.all(), 40)
		arrival := map[string]int{}
		for i, r := range receiver.all() {
			arrival[r.Header.Get(signature.HeaderWebhookID)] = i
		}
		for _, batch := range batches {
			for i := 1; i < len(batch); i++ {
				require.Less(t, arrival[eventOf[batch[i-1].DeliveryID]], arrival[eventOf[batch[i].DeliveryID]],
					"a batch sends in publish order")
			}
		}
		require.Eventually(t, func() bool {
			jobs := b.outboxJobs(t)
			for _, j := range jobs {
				require.Equal(t, outbox.DeliveryBatchKind, j.kind, "no delivery needed a job of its own")
			}
			return !slices.ContainsFunc(jobs, func(j jobOf) bool { return j.state != "completed" })
		}, awaitTimeout, 10*time.Millisecond, "River completes the batch jobs")
	})

	t.Run("FailureHandsItAndTheRestOver", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		var res []*outbox.PublishResult
		receiver := newSink(t, byEvent(&res, func(event, before int) int {
			if event == 1 && before == 0 {
				return http.StatusServiceUnavailable
			}
			return http.StatusNoContent
		}))
		ep := b.endpoint(t, receiver.URL(), nil)
		res = b.publish(t, events(3)...)
		startRiver(t, b.pool, b.outbox)

		for i, r := range res {
			d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
			attempts, err := b.outbox.AttemptList(ctx, d.ID)
			require.NoError(t, err)
			own := b.ownJobs(t, d.ID)
			switch i {
			case 0:
				require.Len(t, attempts, 1)
				require.Empty(t, own)
				continue
			case 2:
				require.Len(t, attempts, 1)
				require.Equal(t, []outbox.DeliveryArgs{{DeliveryID: d.ID, Generation: 1}}, own,
					"after a failure the rest go on in jobs of their own")
				continue
			}
			require.Len(t, attempts, 2)
			require.Equal(t, []int{1, 2}, []int{attempts[0].Number, attempts[1].Number})
			require.Equal(t, []outbox.DeliveryArgs{{DeliveryID: d.ID, Generation: 1, AttemptOffset: 1}}, own,
				"the retry's job goes on from the batch's attempt")
		}
		require.Len(t, receiver.all(), 4)
	})

	t.Run("WhatTheSpanDidNotReachSplitsIntoNewBatches", func(t *testing.T) {
		t.Parallel()
		// The endpoint's cap, 10, leaves slots free for more jobs.
		sizes := spanSplit(t, 2*time.Second, nil, 12, func(n int) bool { return n == 3 }) // the span ends with the third
		require.Equal(t, []int{12, 3, 3, 3}, sizes, "the batch, and what it did not reach: as many to a job as it sent in its span")
	})

	t.Run("SplitMakesNoMoreJobsThanTheEndpointHasFreeSlots", func(t *testing.T) {
		t.Parallel()
		// A cap of 2: the batch holds one slot, one is free, so what it
		// did not reach goes to two jobs (the one slot free, and the one
		// the batch gives back), not three of as many as it sent.
		sizes := spanSplit(t, 2*time.Second, &outbox.EndpointParams{MaxInFlight: 2}, 12, func(n int) bool { return n == 3 })
		require.Equal(t, []int{12, 5, 4}, sizes)
	})

	t.Run("AtTheCapTheBatchGoesOnPastItsSpan", func(t *testing.T) {
		t.Parallel()
		// A cap of 1, which the batch holds: new jobs would only wait for
		// its slot.
		sizes := spanSplit(t, 2*time.Second, &outbox.EndpointParams{MaxInFlight: 1}, 12, func(n int) bool { return n == 3 })
		require.Equal(t, []int{12}, sizes, "one job sends them all")
	})

	t.Run("WhatOneMoreSpanReachesStaysWithTheBatch", func(t *testing.T) {
		t.Parallel()
		// Three sent in the span and three left: the batch sends them in
		// about one more span, which a new job would not beat.
		sizes := spanSplit(t, 2*time.Second, nil, 6, func(n int) bool { return n == 3 })
		require.Equal(t, []int{6}, sizes)
	})

	t.Run("AtTheCapTheBatchSendsForAtMostFourSpans", func(t *testing.T) {
		t.Parallel()
		// Every request outlasts the span, at a cap of 1: the batch sends
		// one in each of four spans, then hands the rest over to one job,
		// which does the same.
		sizes := spanSplit(t, 200*time.Millisecond, &outbox.EndpointParams{MaxInFlight: 1}, 10, func(int) bool { return true })
		require.Equal(t, []int{10, 6, 2}, sizes)
	})

	t.Run("SplitHeedsTheBatchSizeOfTheNodeRunningIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig()) // publishes one batch job of 12
		cfg := testConfig()
		cfg.DeliveryBatchSpan = time.Second
		cfg.DeliveryBatchSize = 1 // batch jobs turned off since
		worker, err := outbox.New(b.pool, cfg)
		require.NoError(t, err)
		receiver := newSink(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 3 {
				time.Sleep(cfg.DeliveryBatchSpan + 100*time.Millisecond)
			}
			w.WriteHeader(http.StatusNoContent)
		})
		ep := b.endpoint(t, receiver.URL(), nil)
		res := b.publish(t, events(12)...)
		require.Len(t, b.outboxJobs(t), 1)
		startRiver(t, b.pool, worker)

		own := 0
		for _, r := range res {
			d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
			require.Equal(t, 1, d.Attempts)
			own += len(b.ownJobs(t, d.ID))
		}
		require.Equal(t, 9, own, "what the batch did not reach, a job each")
		jobs := b.outboxJobs(t)
		require.Len(t, jobs, 10)
		require.Equal(t, outbox.DeliveryBatchKind, jobs[0].kind)
	})

	t.Run("AttemptsCountTheBatchJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig()) // four attempts
		var res []*outbox.PublishResult
		receiver := newSink(t, byEvent(&res, func(event, _ int) int {
			if event == 0 {
				return http.StatusServiceUnavailable
			}
			return http.StatusNoContent
		}))
		ep := b.endpoint(t, receiver.URL(), nil)
		res = b.publish(t, events(2)...)
		startRiver(t, b.pool, b.outbox)

		d := b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusDead)
		require.Equal(t, 4, d.Attempts, "the schedule's four attempts, the batch's first among them")
		require.Equal(t, 4, receiver.byWebhookID()[res[0].EventID])
		b.awaitDelivery(t, ep.ID, res[1].EventID, outbox.StatusSucceeded)
	})

	t.Run("RunAgainLeavesRecordedAndHandedOverDeliveriesAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		receiver := okSink(t)
		ep := b.endpoint(t, receiver.URL(), nil)
		res := b.publish(t, events(4)...)
		ids := make([]uuid.UUID, len(res))
		for i, r := range res {
			ids[i] = b.onlyDelivery(t, r.EventID).ID
		}
		// As a run that stopped midway leaves them: the first succeeded,
		// the second failed and was not yet handed over, the third was
		// handed over (its job is left out here), the fourth not reached.
		_, err := b.pool.Exec(ctx, `UPDATE wharf_outbox_deliveries SET status = 'succeeded', attempts = 1 WHERE id = $1`, ids[0])
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `UPDATE wharf_outbox_deliveries SET status = 'retrying', attempts = 1 WHERE id = $1`, ids[1])
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `UPDATE wharf_outbox_deliveries SET generation = 1 WHERE id = $1`, ids[2])
		require.NoError(t, err)
		startRiver(t, b.pool, b.outbox)

		d := b.awaitDelivery(t, ep.ID, res[1].EventID, outbox.StatusSucceeded)
		require.Equal(t, 2, d.Attempts)
		require.Equal(t, []outbox.DeliveryArgs{{DeliveryID: ids[1], Generation: 1, AttemptOffset: 1}}, b.ownJobs(t, ids[1]))
		b.awaitDelivery(t, ep.ID, res[3].EventID, outbox.StatusSucceeded)
		require.Eventually(t, func() bool {
			return slices.ContainsFunc(b.outboxJobs(t), func(j jobOf) bool {
				return j.kind == outbox.DeliveryBatchKind && j.state == "completed"
			})
		}, awaitTimeout, 10*time.Millisecond)
		sent := receiver.byWebhookID()
		require.Equal(t, map[string]int{res[1].EventID: 1, res[3].EventID: 1}, sent,
			"neither the recorded nor the handed-over delivery is sent again")
		third, err := b.outbox.DeliveryGet(ctx, ids[2])
		require.NoError(t, err)
		require.Equal(t, outbox.StatusPending, third.Status, "the third is its own job's, not the batch's")
	})

	t.Run("LastRunHandsEverythingOver", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		receiver := okSink(t)
		ep := b.endpoint(t, receiver.URL(), nil)
		res := b.publish(t, events(3)...)
		_, err := b.pool.Exec(ctx, `UPDATE river_job SET max_attempts = 1 WHERE kind = $1`, outbox.DeliveryBatchKind)
		require.NoError(t, err)
		startRiver(t, b.pool, b.outbox)
		for _, r := range res {
			d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
			require.Equal(t, 1, d.Attempts)
			require.Equal(t, []outbox.DeliveryArgs{{DeliveryID: d.ID, Generation: 1}}, b.ownJobs(t, d.ID),
				"a run River would not retry sends nothing itself")
		}
	})

	t.Run("RateLimitedEndpointGetsJobsOfItsOwn", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		receiver := okSink(t)
		ep := b.endpoint(t, receiver.URL(), &outbox.EndpointParams{RateLimit: &outbox.RateLimit{PerSecond: 1000, Burst: 1000}})
		res := b.publish(t, events(3)...)
		startRiver(t, b.pool, b.outbox)
		for _, r := range res {
			d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
			require.Equal(t, []outbox.DeliveryArgs{{DeliveryID: d.ID}}, b.ownJobs(t, d.ID),
				"published with a job of its own: a batch job would hand it over")
		}
		for _, j := range b.outboxJobs(t) {
			require.Equal(t, outbox.DeliveryKind, j.kind)
		}
	})

	t.Run("HoldsOneSlotOfTheCap", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		receiver := newSink(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			time.Sleep(5 * time.Millisecond) // long enough for requests to overlap
			w.WriteHeader(http.StatusNoContent)
		})
		ep := b.endpoint(t, receiver.URL(), &outbox.EndpointParams{MaxInFlight: 1})
		var res []*outbox.PublishResult
		for range 3 {
			res = append(res, b.publish(t, events(3)...)...)
		}
		startRiver(t, b.pool, b.outbox)
		for _, r := range res {
			d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
			require.Equal(t, 1, d.Attempts)
		}
		require.EqualValues(t, 1, receiver.maxSeen.Load(), "three batches, one request in flight at a time")
	})

	t.Run("ReplayedDeadDeliveriesGetTheirAttemptsAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig()) // four attempts
		var healthy atomic.Bool
		receiver := newSink(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			if healthy.Load() {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		ep := b.endpoint(t, receiver.URL(), nil)
		since := time.Now().Add(-time.Hour)
		res := b.publish(t, events(2)...)
		startRiver(t, b.pool, b.outbox)
		for _, r := range res {
			d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusDead)
			require.Equal(t, 4, d.Attempts)
		}

		healthy.Store(true)
		n, err := b.outbox.DeliveryReplayDead(ctx, ep.ID, since)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		for _, r := range res {
			d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusSucceeded)
			require.Equal(t, 5, d.Attempts, "four before the replay, one after")
			require.Equal(t, 5, receiver.byWebhookID()[r.EventID])
			for _, own := range b.ownJobs(t, d.ID) {
				require.Less(t, own.Generation, 2, "the replay's batch job sent it itself")
			}
		}
	})

	t.Run("ReplayedBatchThatFailsGoesOnFromItsOwnAttempts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig()) // four attempts
		receiver := newSink(t, status(http.StatusServiceUnavailable))
		ep := b.endpoint(t, receiver.URL(), nil)
		since := time.Now().Add(-time.Hour)
		res := b.publish(t, events(2)...)
		startRiver(t, b.pool, b.outbox)
		for _, r := range res {
			b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusDead)
		}
		n, err := b.outbox.DeliveryReplayDead(ctx, ep.ID, since)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.Eventually(t, func() bool {
			for _, r := range res {
				d := b.onlyDelivery(t, r.EventID)
				if d.Status != outbox.StatusDead || d.Attempts != 8 {
					return false
				}
			}
			return true
		}, awaitTimeout, 10*time.Millisecond, "four attempts before the replay, four after")
		var offsets []int
		for _, r := range res {
			require.Equal(t, 8, receiver.byWebhookID()[r.EventID])
			d := b.onlyDelivery(t, r.EventID)
			for _, own := range b.ownJobs(t, d.ID) {
				if own.Generation == 3 {
					offsets = append(offsets, own.AttemptOffset)
				}
			}
		}
		slices.Sort(offsets)
		require.Equal(t, []int{0, 1}, offsets,
			"the replay's batch attempted the first (its job goes on from that attempt) and handed the second over untried")
	})

	t.Run("DuplicateAndForeignRefsAreNotSentTwice", func(t *testing.T) {
		t.Parallel()
		b := setup(t, singleJobConfig())
		receiver := okSink(t)
		ep := b.endpoint(t, receiver.URL(), nil)
		other := b.endpoint(t, receiver.URL(), &outbox.EndpointParams{Tenant: "other"})
		mine := b.publish(t, events(1)...)
		theirs := b.publish(t, &outbox.Event{Type: "batch.event", Tenant: "other"})
		d := b.onlyDelivery(t, mine[0].EventID)
		od := b.onlyDelivery(t, theirs[0].EventID)
		require.Equal(t, other.ID, od.EndpointID)
		// A batch job written by hand: its own delivery twice and another
		// endpoint's, whose jobs of their own are gone.
		_, err := b.pool.Exec(ctx, `DELETE FROM river_job`)
		require.NoError(t, err)
		inserter, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{})
		require.NoError(t, err)
		_, err = inserter.Insert(ctx, outbox.DeliveryBatchArgs{EndpointID: ep.ID, Deliveries: []outbox.DeliveryRef{
			{DeliveryID: d.ID}, {DeliveryID: d.ID}, {DeliveryID: od.ID},
		}}, &river.InsertOpts{Queue: b.outbox.Queue()})
		require.NoError(t, err)
		startRiver(t, b.pool, b.outbox)

		b.awaitDelivery(t, ep.ID, mine[0].EventID, outbox.StatusSucceeded)
		b.awaitDelivery(t, other.ID, theirs[0].EventID, outbox.StatusSucceeded)
		require.Equal(t, []outbox.DeliveryArgs{{DeliveryID: od.ID, Generation: 1}}, b.ownJobs(t, od.ID),
			"another endpoint's delivery goes on in a job of its own")
		require.Equal(t, map[string]int{mine[0].EventID: 1, theirs[0].EventID: 1}, receiver.byWebhookID())
	})

	t.Run("RemoteCancelDeadLettersTheBatch", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		var deadMu sync.Mutex
		dead := map[string][]string{} // event id: the reasons OnDead was given
		cfg.OnDead = func(_ context.Context, d outbox.DeadDelivery) {
			deadMu.Lock()
			defer deadMu.Unlock()
			dead[d.EventID] = append(dead[d.EventID], d.Reason)
		}
		b := setup(t, cfg)
		receiver := newSink(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // answers only once the sender gives up
		})
		ep := b.endpoint(t, receiver.URL(), nil)
		client := startRiver(t, b.pool, b.outbox)
		res := b.publish(t, events(3)...)
		select {
		case <-receiver.arrived:
		case <-time.After(15 * time.Second):
			t.Fatal("no delivery was attempted")
		}
		var jobID int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT id FROM river_job WHERE kind = $1`, outbox.DeliveryBatchKind).Scan(&jobID))
		_, err := client.JobCancel(ctx, jobID)
		require.NoError(t, err)

		for i, r := range res {
			d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusDead)
			require.Contains(t, d.LastError, "cancelled")
			require.Equal(t, max(1-i, 0), d.Attempts, "the interrupted attempt is recorded; the rest were never sent")
			require.Empty(t, b.ownJobs(t, d.ID), "nothing goes on after a cancellation")
		}
		require.Len(t, receiver.all(), 1)
		// OnDead runs after the statement that made a delivery dead has
		// committed, so a delivery can read dead a moment before its hook
		// has run: await the hooks.
		require.Eventually(t, func() bool {
			deadMu.Lock()
			defer deadMu.Unlock()
			return len(dead) == 3
		}, awaitTimeout, 10*time.Millisecond, "OnDead learns of every delivery the cancellation made dead")
		deadMu.Lock()
		defer deadMu.Unlock()
		require.Len(t, dead, 3, "OnDead learns of every delivery the cancellation made dead")
		for _, r := range res {
			require.Len(t, dead[r.EventID], 1, "once")
			require.Contains(t, dead[r.EventID][0], "cancelled")
		}
	})

	t.Run("ReplayOfAQueuedDeliveryIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		ep := b.endpoint(t, okSink(t).URL(), nil)
		res := b.publish(t, events(2)...)
		d := b.onlyDelivery(t, res[1].EventID)
		require.ErrorIs(t, b.outbox.DeliveryReplay(ctx, d.ID), outbox.ErrDeliveryInProgress)
		startRiver(t, b.pool, b.outbox)
		b.awaitDelivery(t, ep.ID, res[1].EventID, outbox.StatusSucceeded)
	})
}
