package delivery

import (
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/egress"
)

// retryPlan turns the retry schedule and an attempt's outcome into the time
// of the next attempt. Work decides it (only Work has seen the response:
// Retry-After, 429, timeout) and leaves it on the job for NextRetry (see
// Args.retryAt).
type retryPlan struct {
	schedule      []time.Duration
	jitter        float64       // 0: none
	throttledMin  time.Duration // 0: none
	retryAfterMax time.Duration // 0: Retry-After ignored
}

// newRetryPlan is the plan of c, whose -1s (disabled) become 0s.
func newRetryPlan(c *Config) *retryPlan {
	return &retryPlan{
		schedule:      c.RetrySchedule,
		jitter:        max(c.RetryJitter, 0),
		throttledMin:  max(c.ThrottledRetryMin, 0),
		retryAfterMax: max(c.RetryAfterMax, 0),
	}
}

// attempts is how many attempts a delivery gets under the current schedule.
func (p *retryPlan) attempts() int { return len(p.schedule) }

// attemptLimit is how many attempts job gets: the current schedule's length,
// but never more than the job was inserted for (its MaxAttempts less one,
// so that a run remains to dead-letter the delivery), so that a job inserted
// under a shorter schedule before a redeploy still finishes its delivery
// before River discards it.
func (p *retryPlan) attemptLimit(job *river.Job[Args]) int {
	return max(min(p.attempts(), job.MaxAttempts-1+job.Args.AttemptOffset), 1)
}

// firstDelay is the wait before a published delivery's first attempt: the
// schedule's first entry, without jitter.
func (p *retryPlan) firstDelay() time.Duration { return p.schedule[0] }

// scheduled returns the jittered wait after failed attempt number attempt
// (1-based), before attempt+1.
func (p *retryPlan) scheduled(attempt int) time.Duration {
	i := min(max(attempt, 1), len(p.schedule)-1)
	return p.jittered(p.schedule[i])
}

func (p *retryPlan) jittered(d time.Duration) time.Duration {
	if p.jitter == 0 || d <= 0 {
		return d
	}
	spread := float64(d) * p.jitter
	return time.Duration(float64(d) - spread + rand.Float64()*2*spread) //nolint:gosec // jitter needs no crypto
}

// wait returns the wait after failed attempt number attempt given its
// outcome: the schedule's, stretched to at least throttledMin after a
// timeout or 429, and to the response's Retry-After (capped) when it asks
// for longer.
func (p *retryPlan) wait(attempt int, out *egress.Outcome) time.Duration {
	d := p.scheduled(attempt)
	if out.TimedOut || out.StatusCode == http.StatusTooManyRequests {
		d = max(d, p.throttledMin)
	}
	if out.RetryAfter > 0 && p.retryAfterMax > 0 {
		d = max(d, min(out.RetryAfter, p.retryAfterMax))
	}
	return d
}
