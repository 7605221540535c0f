package outbox

import (
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/egress"
	"github.com/wharfhq/wharf/internal/shared"
)

// spareRuns is how many more runs than attempts a delivery job may have
// (its River MaxAttempts is the schedule's length plus spareRuns). A run
// that ends without a recorded outcome (the worker crashed or panicked, or
// recording failed) still uses one of River's attempts; the spare runs let
// the job then dead-letter the delivery itself rather than River discard the
// job and leave the delivery pending with no job.
const spareRuns = 3

// retryPlan turns the retry schedule and an attempt's outcome into the time
// of the next attempt.
//
// River asks the worker for the next retry time (NextRetry) right after Work
// returns an error, with the same *Job. Only Work has seen the response
// (Retry-After, 429, timeout), so Work leaves its decision here, keyed by job
// id, and NextRetry takes it. A job River rescues after a crash was never
// seen by Work: NextRetry then falls back to the plain schedule.
type retryPlan struct {
	schedule      []time.Duration
	jitter        float64
	throttledMin  time.Duration
	retryAfterMax time.Duration

	mu      sync.Mutex
	decided map[int64]time.Time // job id → next attempt
}

func newRetryPlan(c *Config) *retryPlan {
	retryAfterMax := c.RetryAfterMax
	if !c.retryAfterEnabled() {
		retryAfterMax = 0
	}
	return &retryPlan{
		schedule:      c.RetrySchedule,
		jitter:        c.jitter(),
		throttledMin:  c.throttledMin(),
		retryAfterMax: retryAfterMax,
		decided:       make(map[int64]time.Time),
	}
}

// attempts is how many attempts a delivery gets under the current schedule.
func (p *retryPlan) attempts() int { return len(p.schedule) }

// attemptLimit is how many attempts job gets: the current schedule's length,
// but never more than the job was inserted for (its MaxAttempts less one,
// so that a run remains to dead-letter the delivery), so that a job inserted
// under a shorter schedule before a redeploy still finishes its delivery
// before River discards it.
func (p *retryPlan) attemptLimit(job *river.Job[DeliveryArgs]) int {
	return max(min(p.attempts(), job.MaxAttempts-1+job.Args.AttemptOffset), 1)
}

// attemptOf is the delivery's attempt number of job's current run: River's
// count of the job's runs, plus the attempts made before the job (a batch
// job's).
func attemptOf(job *river.Job[DeliveryArgs]) int {
	return job.Attempt + job.Args.AttemptOffset
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

// snoozeCount returns how often River has snoozed job: the "snoozes" count
// River keeps in the job's metadata (0 when absent or unreadable).
func snoozeCount(job *river.Job[DeliveryArgs]) int {
	if job.JobRow == nil {
		return 0
	}
	return shared.SnoozeCount(job.Metadata)
}

// decide records the next attempt of job id, for NextRetry.
func (p *retryPlan) decide(jobID int64, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.decided[jobID] = at
}

// take returns and forgets the next attempt decided for job id.
func (p *retryPlan) take(jobID int64) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.decided[jobID]
	delete(p.decided, jobID)
	return at, ok
}
