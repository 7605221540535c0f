package outbox

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/outboxtype"
)

// Bounds of an endpoint's rate limit.
const (
	maxRatePerSecond = 1_000_000
	maxRateBurst     = 1_000_000
)

// RateLimit caps how fast deliveries go to an endpoint: a token bucket of
// Burst tokens refilled at PerSecond, shared by every process that
// delivers (it lives in Postgres). It holds beside the endpoint's
// MaxInFlight; a delivery that must wait for a token is snoozed without
// using an attempt.
type RateLimit struct {
	// PerSecond is the sustained rate in requests per second, more than 0
	// and at most 1,000,000; fractions are fine (0.5 is one request every
	// two seconds).
	PerSecond float64
	// Burst is how many requests may go at once after a quiet spell, 1 to
	// 1,000,000. Defaults to 1: requests evenly spaced, 1/PerSecond apart.
	Burst int
}

// String describes the limit, as "10/s burst 20".
func (r *RateLimit) String() string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("%g/s burst %d", r.PerSecond, r.Burst)
}

// checkRateLimit validates a rate limit and returns it as stored: 0 and 0
// for none (nil or the zero RateLimit).
func checkRateLimit(r *RateLimit) (perSecond float64, burst int32, err error) {
	if r == nil || *r == (RateLimit{}) {
		return 0, 0, nil
	}
	if math.IsNaN(r.PerSecond) || r.PerSecond <= 0 || r.PerSecond > maxRatePerSecond {
		return 0, 0, fmt.Errorf("%w: RateLimit.PerSecond must be more than 0 and at most %d", ErrInvalidEndpoint, maxRatePerSecond)
	}
	if r.Burst < 0 || r.Burst > maxRateBurst {
		return 0, 0, fmt.Errorf("%w: RateLimit.Burst must be 1 to %d (0: 1)", ErrInvalidEndpoint, maxRateBurst)
	}
	return r.PerSecond, int32(max(r.Burst, 1)), nil
}

// rateLimitFromRow returns the Endpoint.RateLimit of a stored limit.
func rateLimitFromRow(perSecond float64, burst int32) *RateLimit {
	if perSecond <= 0 {
		return nil
	}
	return &RateLimit{PerSecond: perSecond, Burst: int(burst)}
}

// How deliveries wait for tokens.
const (
	// rateMaxSleep bounds how long a delivery waits in its worker for a
	// token: one due within it is taken at once, and the worker sleeps
	// until it is due, holding its concurrency slot, then sends on time.
	// A snoozed job comes back a few hundred milliseconds late (River
	// records a snooze up to 250 ms after it, and finds the job at its
	// next fetch), late enough to waste tokens; sleeping keeps a limited
	// endpoint at its rate.
	rateMaxSleep = time.Second
	// rateMaxSleepers bounds the same wait to this many tokens' time, so
	// that at high rates at most about this many workers of a process
	// sleep for one endpoint.
	rateMaxSleepers = 20
	// rateHorizon bounds the queue of deliveries waiting for tokens: one
	// whose turn would come later gets none and asks again (at most a
	// minute later), so that a large backlog does not queue for hours, and
	// a turn left unused (its delivery replayed or deleted, the limit
	// raised) holds others back for at most this long.
	rateHorizon = time.Minute
	// ratePromptSnooze is the longest snooze River ends on time: it makes
	// a job snoozed for up to its scheduler's interval (5 s) available at
	// once, due at the snooze's end, where a longer snooze waits for the
	// scheduler's next run, up to 5 s late. A delivery whose turn comes
	// later first snoozes until this long before it, then exactly.
	ratePromptSnooze = 4500 * time.Millisecond
)

// turnWake returns how long to snooze a delivery whose turn comes in d: d
// when River ends such a snooze on time, else d less ratePromptSnooze,
// after which the delivery snoozes the rest exactly.
func turnWake(d time.Duration) time.Duration {
	if d <= ratePromptSnooze {
		return max(d, 0)
	}
	return d - ratePromptSnooze
}

// seconds converts a number of seconds from the database to a duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// turn reads a delivery's turn for a token: queued when it has come (the
// delivery then goes before those that have not waited), else how long to
// snooze first when it is more than rateMaxSleep away.
func turn(row *outboxtype.Delivery) (queued bool, early time.Duration) {
	if row.ThrottledUntil == nil {
		return false, 0
	}
	if in := row.ThrottledUntil.Sub(row.DBNow); in > rateMaxSleep {
		return false, turnWake(in)
	}
	return true, 0
}

// takeToken takes a token of the endpoint's rate limit (OutboxRateTake):
// admitted when one is due soon (the admission's sleep: wait for it in the
// worker) or the endpoint has no limit (any more), else a turn to snooze
// until. With turnOnly it takes no token: the delivery waits for its turn
// whatever (its endpoint is at its cap).
func (o *Outbox) takeToken(ctx context.Context, row *outboxtype.Delivery, queued, turnOnly bool) (admission, error) {
	for range acquireTries {
		res, err := o.queries.OutboxRateTake(ctx, dbsqlc.OutboxRateTakeParams{
			EndpointID: row.EndpointID, MaxSleepSeconds: rateMaxSleep.Seconds(), MaxSleepers: rateMaxSleepers,
			TurnOnly: turnOnly, Queued: queued, HorizonSeconds: rateHorizon.Seconds(),
		})
		if err != nil {
			return admission{}, err
		}
		if res.BucketMissing {
			if err := o.queries.OutboxRateBucketCreate(ctx, row.EndpointID); err != nil {
				return admission{}, err
			}
			continue
		}
		return o.tokenAnswer(ctx, row, &res)
	}
	return deferred(deferRateLimit, o.retries.busy()), nil
}

// tokenAnswer turns OutboxRateTake's answer into an admission: a token
// taken admits (after its wait), a turn is stored on the delivery and
// snoozed until, and a turn beyond rateHorizon is asked for again later.
// An endpoint without a limit admits.
func (o *Outbox) tokenAnswer(ctx context.Context, row *outboxtype.Delivery, res *dbsqlc.OutboxRateTakeRow) (admission, error) {
	wait := seconds(res.WaitSeconds)
	switch {
	case !res.RateLimited:
		return admitted(noLease), nil
	case res.TokenGranted:
		a := admitted(noLease)
		a.sleep = max(wait, 0)
		return a, nil
	case res.Ticketed:
		_, err := o.queries.OutboxDeliveryThrottle(ctx, dbsqlc.OutboxDeliveryThrottleParams{
			TurnInSeconds: res.WaitSeconds, ID: row.ID, Generation: row.Generation,
		})
		if err != nil {
			return admission{}, fmt.Errorf("store the delivery's turn: %w", err)
		}
		return deferred(deferRateLimit, turnWake(wait)), nil
	}
	return deferred(deferRateLimit, o.retries.beyondHorizon(wait-rateHorizon)), nil
}
