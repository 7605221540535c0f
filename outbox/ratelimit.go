package outbox

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/wharfhq/wharf/internal/dbsqlc"
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
	// rateHorizon bounds how far ahead a delivery reserves a token: one
	// whose token would be due later takes none and asks again (at most a
	// minute later), so that a large backlog does not book the endpoint
	// for hours, and a changed limit, a replay or a deleted delivery
	// leaves at most this much booked.
	rateHorizon = time.Minute
	// ratePromptSnooze is the longest snooze River ends on time: it makes
	// a job snoozed for up to its scheduler's interval (5 s) available at
	// once, due at the snooze's end, where a longer snooze waits for the
	// scheduler's next run, up to 5 s late. A delivery whose token is due
	// later first snoozes until this long before it, then exactly.
	ratePromptSnooze = 4500 * time.Millisecond
	// rateReservationGrace is how long after its time a reserved token is
	// still used: a delivery that River woke later (its fetch poll, busy
	// workers) sends on it, one kept waiting longer (the concurrency cap,
	// the circuit, its ordering key) takes a new one, so that late
	// deliveries cannot bunch up beyond the limit.
	rateReservationGrace = 2 * time.Second
)

// tokenWake returns how long to snooze a delivery whose reserved token is
// due in d: d when River ends such a snooze on time, else d less
// ratePromptSnooze, after which the delivery snoozes the rest exactly.
func tokenWake(d time.Duration) time.Duration {
	if d <= ratePromptSnooze {
		return max(d, 0)
	}
	return d - ratePromptSnooze
}

// seconds converts a number of seconds from the database to a duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// reservation reads the token a delivery reserved: due now (or within
// rateReservationGrace ago), reported as held, or due later, reported as
// how long to snooze first. A reservation older than the grace is ignored.
func reservation(row *dbsqlc.OutboxDeliveryGetForWorkRow) (held bool, early time.Duration) {
	if row.RateReservedAt == nil {
		return false, 0
	}
	in := row.RateReservedAt.Sub(row.DbNow)
	switch {
	case in > 0:
		return false, tokenWake(in)
	case in >= -rateReservationGrace:
		return true, 0
	}
	return false, 0
}

// takeToken takes a token of the endpoint's rate limit for a delivery that
// takes no concurrency slot (its endpoint has no cap, or the slot was taken
// by OutboxLeaseAcquireCounted): admitted when one is due now or the
// endpoint has no limit (any more), else how long to wait.
func (o *Outbox) takeToken(ctx context.Context, row *dbsqlc.OutboxDeliveryGetForWorkRow) (admission, error) {
	for range acquireTries {
		res, err := o.queries.OutboxRateTake(ctx, dbsqlc.OutboxRateTakeParams{
			EndpointID: row.EndpointID, HorizonSeconds: rateHorizon.Seconds(),
		})
		switch {
		case err != nil:
			return admission{}, err
		case !res.RateLimited:
			return admitted(noLease), nil
		case res.BucketMissing:
			if err := o.queries.OutboxRateBucketCreate(ctx, row.EndpointID); err != nil {
				return admission{}, err
			}
			continue
		}
		return o.tokenAnswer(ctx, row, noLease, res.TokenTaken, res.TokenDueIn)
	}
	return deferred(deferRateLimit, o.retries.busy()), nil
}

// tokenAnswer turns a token statement's answer into an admission: a token
// due now admits (with slot), one reserved for later is stored on the
// delivery and waited for, and one beyond rateHorizon is asked for again
// later.
func (o *Outbox) tokenAnswer(ctx context.Context, row *dbsqlc.OutboxDeliveryGetForWorkRow, slot int32, taken bool, dueIn float64) (admission, error) {
	switch {
	case taken && dueIn <= 0:
		return admitted(slot), nil
	case taken:
		_, err := o.queries.OutboxDeliveryReserveToken(ctx, dbsqlc.OutboxDeliveryReserveTokenParams{
			DueInSeconds: dueIn, ID: row.ID, Generation: row.Generation,
		})
		if err != nil {
			return admission{}, fmt.Errorf("store the token reserved: %w", err)
		}
		return deferred(deferRateLimit, tokenWake(seconds(dueIn))), nil
	}
	return deferred(deferRateLimit, o.retries.beyondHorizon(seconds(dueIn)-rateHorizon)), nil
}
