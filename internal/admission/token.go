package admission

import (
	"context"
	"fmt"
	"time"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/outboxtype"
)

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

// takeToken takes a token of the endpoint's rate limit (OutboxRateTake)
// into t: admitted when one is due soon (t's sleep: wait for it in the
// worker) or the endpoint has no limit (any more), else a turn to snooze
// until. With turnOnly it takes no token: the delivery waits for its turn
// whatever (its endpoint is at its cap).
func (g *Gate) takeToken(ctx context.Context, d *outboxtype.Delivery, queued, turnOnly bool, t *Ticket) error {
	for range acquireTries {
		res, err := g.queries.OutboxRateTake(ctx, dbsqlc.OutboxRateTakeParams{
			EndpointID: d.EndpointID, MaxSleepSeconds: rateMaxSleep.Seconds(), MaxSleepers: rateMaxSleepers,
			TurnOnly: turnOnly, Queued: queued, HorizonSeconds: rateHorizon.Seconds(),
		})
		if err != nil {
			return err
		}
		if res.BucketMissing {
			if err := g.queries.OutboxRateBucketCreate(ctx, d.EndpointID); err != nil {
				return err
			}
			continue
		}
		return g.tokenAnswer(ctx, d, &res, t)
	}
	return deferred(ReasonRateLimit, g.Busy())
}

// tokenAnswer turns OutboxRateTake's answer into an admission: a token
// taken admits (after its wait), a turn is stored on the delivery and
// snoozed until, and a turn beyond rateHorizon is asked for again later.
// An endpoint without a limit admits.
func (g *Gate) tokenAnswer(ctx context.Context, d *outboxtype.Delivery, res *dbsqlc.OutboxRateTakeRow, t *Ticket) error {
	wait := seconds(res.WaitSeconds)
	switch {
	case !res.RateLimited:
		return nil
	case res.TokenGranted:
		t.sleep = max(wait, 0)
		return nil
	case res.Ticketed:
		_, err := g.queries.OutboxDeliveryThrottle(ctx, dbsqlc.OutboxDeliveryThrottleParams{
			TurnInSeconds: res.WaitSeconds, ID: d.ID, Generation: d.Generation,
		})
		if err != nil {
			return fmt.Errorf("store the delivery's turn: %w", err)
		}
		return deferred(ReasonRateLimit, turnWake(wait))
	}
	return deferred(ReasonRateLimit, g.beyondHorizon(wait-rateHorizon))
}
