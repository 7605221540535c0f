package delivery

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/egress"
)

func TestRetryPlan(t *testing.T) {
	t.Parallel()
	t.Run("DefaultScheduleWithJitter", func(t *testing.T) {
		t.Parallel()
		cfg := (*Config)(nil).withDefaults()
		plan := newRetryPlan(&cfg)
		require.Equal(t, 8, plan.attempts())
		for attempt := 1; attempt < 8; attempt++ {
			want := DefaultRetrySchedule[attempt]
			for range 50 {
				got := plan.scheduled(attempt)
				require.GreaterOrEqual(t, got, time.Duration(float64(want)*0.8), "attempt %d", attempt)
				require.LessOrEqual(t, got, time.Duration(float64(want)*1.2), "attempt %d", attempt)
			}
		}
	})

	t.Run("ThrottlingAndRetryAfter", func(t *testing.T) {
		t.Parallel()
		cfg := (&Config{RetrySchedule: []time.Duration{0, time.Second, time.Second}, RetryJitter: -1}).withDefaults()
		plan := newRetryPlan(&cfg)
		require.Equal(t, time.Second, plan.wait(1, &egress.Outcome{StatusCode: 500}))
		require.Equal(t, time.Minute, plan.wait(1, &egress.Outcome{StatusCode: http.StatusTooManyRequests}))
		require.Equal(t, time.Minute, plan.wait(1, &egress.Outcome{TimedOut: true}))
		require.Equal(t, 10*time.Minute, plan.wait(1, &egress.Outcome{StatusCode: 503, RetryAfter: 10 * time.Minute}))
		require.Equal(t, time.Hour, plan.wait(1, &egress.Outcome{StatusCode: 429, RetryAfter: 48 * time.Hour}), "capped")
		require.Equal(t, time.Minute, plan.wait(1, &egress.Outcome{StatusCode: 429, RetryAfter: time.Second}), "never shorter than the throttle minimum")

		ignoring := (&Config{RetrySchedule: []time.Duration{0, time.Second}, RetryJitter: -1, RetryAfterMax: -1, ThrottledRetryMin: -1}).withDefaults()
		require.Equal(t, time.Second, newRetryPlan(&ignoring).wait(1, &egress.Outcome{StatusCode: 429, RetryAfter: time.Hour}))
	})

	t.Run("WorksDecisionIsNextRetrys", func(t *testing.T) {
		t.Parallel()
		cfg := (&Config{RetrySchedule: []time.Duration{0, time.Hour}, RetryJitter: -1}).withDefaults()
		w := &Worker{engine: &Engine{config: cfg, retries: newRetryPlan(&cfg)}}
		job := &river.Job[Args]{JobRow: &rivertype.JobRow{Attempt: 1}}
		job.Args.retryIn, job.Args.retrySet = 2*time.Hour, true
		require.WithinDuration(t, time.Now().Add(2*time.Hour), w.NextRetry(job), time.Minute, "the wait Work decided")
		job.Args.retryIn = 0
		before := time.Now()
		require.False(t, w.NextRetry(job).Before(before), "a wait of 0 is due at once, not before River's clock")
		rescued := &river.Job[Args]{JobRow: &rivertype.JobRow{Attempt: 1}}
		require.WithinDuration(t, time.Now().Add(time.Hour), w.NextRetry(rescued), time.Minute, "a job Work did not finish: the schedule")
		plan := newRetryPlan(&Config{RetrySchedule: []time.Duration{0}})
		require.Equal(t, time.Duration(0), plan.firstDelay())
		require.Equal(t, time.Minute, newRetryPlan(&Config{RetrySchedule: []time.Duration{time.Minute, 0}}).firstDelay())
	})

	t.Run("AttemptLimitIsTheJobsAsWellAsTheSchedules", func(t *testing.T) {
		t.Parallel()
		plan := newRetryPlan(&Config{RetrySchedule: make([]time.Duration, 8)})
		job := func(maxAttempts int) *river.Job[Args] {
			return &river.Job[Args]{JobRow: &rivertype.JobRow{MaxAttempts: maxAttempts}}
		}
		require.Equal(t, 8, plan.attemptLimit(job(8+spareRuns)), "inserted under this schedule")
		require.Equal(t, 4, plan.attemptLimit(job(2+spareRuns)), "inserted under a shorter one")
		require.Equal(t, 2, plan.attemptLimit(job(3)), "inserted before the spare runs grew to 3")
		require.Equal(t, 8, plan.attemptLimit(job(25)), "inserted under a longer one")
		require.Equal(t, 1, plan.attemptLimit(job(1)))
	})

	t.Run("SnoozeCountFromMetadata", func(t *testing.T) {
		t.Parallel()
		job := func(metadata string) *river.Job[Args] {
			return &river.Job[Args]{JobRow: &rivertype.JobRow{Metadata: []byte(metadata)}}
		}
		require.Equal(t, 3, snoozeCount(job(`{"snoozes": 3, "other": true}`)))
		require.Zero(t, snoozeCount(job(`{}`)))
		require.Zero(t, snoozeCount(job(``)))
		require.Zero(t, snoozeCount(job(`{"snoozes": "x"}`)))
		require.Zero(t, snoozeCount(&river.Job[Args]{}))
	})

}

func TestBatchSizes(t *testing.T) {
	t.Parallel()
	e := &Engine{config: Config{DeliveryBatchSize: 64}}
	for _, c := range []struct {
		n           int
		maxInFlight int32
		want        []int
	}{
		{1, 10, []int{1}},
		{16, 10, []int{16}},
		{40, 10, []int{14, 13, 13}}, // spread to the cap, a job per 16 at most
		{640, 10, []int{64, 64, 64, 64, 64, 64, 64, 64, 64, 64}},
		{641, 10, []int{59, 59, 59, 58, 58, 58, 58, 58, 58, 58, 58}}, // more than the cap: 64 at most
		{100, 2, []int{50, 50}},
		{130, 1, []int{44, 43, 43}},
		{5000, 100, slices.Repeat([]int{50}, 100)},
		{64, 0, []int{16, 16, 16, 16}}, // no cap: a job per 16
		{17, 0, []int{9, 8}},
	} {
		got := e.batchSizes(c.n, c.maxInFlight)
		require.Equal(t, c.want, got, "%d deliveries, cap %d", c.n, c.maxInFlight)
	}
	small := &Engine{config: Config{DeliveryBatchSize: 4}}
	require.Equal(t, []int{4, 4, 4, 4, 4}, small.batchSizes(20, 6), "a job per batch size at most, when it is under 16")
}

func TestTransientDatabaseError(t *testing.T) {
	t.Parallel()
	for code, transient := range map[string]bool{
		pgerrcode.ConnectionFailure:         true,
		pgerrcode.SerializationFailure:      true,
		pgerrcode.DeadlockDetected:          true,
		pgerrcode.TooManyConnections:        true,
		pgerrcode.AdminShutdown:             true,
		pgerrcode.CannotConnectNow:          true,
		pgerrcode.QueryCanceled:             true,
		pgerrcode.LockNotAvailable:          true,
		pgerrcode.UndefinedTable:            false,
		pgerrcode.SyntaxError:               false,
		pgerrcode.UniqueViolation:           false,
		pgerrcode.InvalidTextRepresentation: false,
	} {
		err := fmt.Errorf("outbox: load delivery: %w", &pgconn.PgError{Code: code})
		require.Equal(t, transient, transientDatabaseError(err), code)
	}
	require.True(t, transientDatabaseError(fmt.Errorf("x: %w", io.ErrUnexpectedEOF)))
	require.True(t, transientDatabaseError(&net.OpError{Op: "dial", Err: errors.New("connection refused")}))
	require.False(t, transientDatabaseError(errors.New("cannot scan")))
}
