package outbox

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryPlan(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	t.Run("DefaultScheduleWithJitter", func(t *testing.T) {
		t.Parallel()
		cfg, err := (*Config)(nil).withDefaults()
		require.NoError(t, err)
		plan := newRetryPlan(cfg)
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
		cfg, err := (&Config{RetrySchedule: []time.Duration{0, time.Second, time.Second}, RetryJitter: -1}).withDefaults()
		require.NoError(t, err)
		plan := newRetryPlan(cfg)
		require.Equal(t, time.Second, plan.wait(1, &sendOutcome{statusCode: 500}))
		require.Equal(t, time.Minute, plan.wait(1, &sendOutcome{statusCode: http.StatusTooManyRequests}))
		require.Equal(t, time.Minute, plan.wait(1, &sendOutcome{timedOut: true}))
		require.Equal(t, 10*time.Minute, plan.wait(1, &sendOutcome{statusCode: 503, retryAfter: 10 * time.Minute}))
		require.Equal(t, time.Hour, plan.wait(1, &sendOutcome{statusCode: 429, retryAfter: 48 * time.Hour}), "capped")
		require.Equal(t, time.Minute, plan.wait(1, &sendOutcome{statusCode: 429, retryAfter: time.Second}), "never shorter than the throttle minimum")

		ignoring, err := (&Config{RetrySchedule: []time.Duration{0, time.Second}, RetryJitter: -1, RetryAfterMax: -1, ThrottledRetryMin: -1}).withDefaults()
		require.NoError(t, err)
		require.Equal(t, time.Second, newRetryPlan(ignoring).wait(1, &sendOutcome{statusCode: 429, retryAfter: time.Hour}))
	})

	t.Run("DecisionsAreTakenOnce", func(t *testing.T) {
		t.Parallel()
		plan := newRetryPlan(&Config{RetrySchedule: []time.Duration{0}, BusyRetryDelay: time.Second})
		plan.decide(7, now)
		at, ok := plan.take(7)
		require.True(t, ok)
		require.Equal(t, now, at)
		_, ok = plan.take(7)
		require.False(t, ok)
		busy := plan.busy()
		require.GreaterOrEqual(t, busy, time.Second)
		require.LessOrEqual(t, busy, time.Second+time.Second/4)
	})

	t.Run("ParseRetryAfter", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 120*time.Second, parseRetryAfter("120", now))
		require.Equal(t, 90*time.Second, parseRetryAfter(now.Add(90*time.Second).Format(http.TimeFormat), now))
		for _, bad := range []string{"", "0", "-5", "soon", now.Add(-time.Hour).Format(http.TimeFormat)} {
			require.Zero(t, parseRetryAfter(bad, now), bad)
		}
	})
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	cfg, err := (*Config)(nil).withDefaults()
	require.NoError(t, err)
	require.Equal(t, DefaultQueue, cfg.Queue)
	require.Equal(t, DefaultRetrySchedule, cfg.RetrySchedule)
	require.Equal(t, 256<<10, cfg.MaxPayloadBytes)
	require.Equal(t, 16<<10, cfg.ResponseBodyLimit)
	require.Equal(t, 24*time.Hour, cfg.SecretRotationOverlap)
	require.Equal(t, 5*24*time.Hour, cfg.DisableAfter)

	for name, bad := range map[string]*Config{
		"empty schedule":    {RetrySchedule: []time.Duration{}},
		"negative schedule": {RetrySchedule: []time.Duration{0, -time.Second}},
		"jitter":            {RetryJitter: 1.5},
		"timeout":           {EndpointTimeout: time.Hour},
		"max in flight":     {MaxInFlight: -3},
		"payload":           {MaxPayloadBytes: -1},
		"disable after":     {DisableAfter: -2},
	} {
		_, err := bad.withDefaults()
		require.ErrorIs(t, err, ErrInvalidConfig, name)
	}
}
