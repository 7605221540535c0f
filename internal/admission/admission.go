// Package admission decides whether a delivery's attempt may go now under
// its endpoint's circuit breaker, concurrency cap and rate limit, and
// holds what it took for the attempt. Admit returns a Ticket (the
// circuit's probe, a concurrency slot, a rate limit token's due time) or
// a *Deferral saying how long to wait; one deferred Ticket.Release gives
// back whatever the attempt's record did not settle.
//
// Slots, tokens and probes are rows in Postgres, shared by every process
// that delivers, and timed by the database's clock, so that nodes whose
// clocks disagree agree on them.
package admission

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/groupcommit"
	"github.com/wharfhq/wharf/internal/outboxtype"
)

// Deferral reasons, the reason label of wharf_outbox_deferred_total.
const (
	ReasonRateLimit   = "rate_limit"   // its endpoint's token is not due yet
	ReasonCircuit     = "circuit_open" // its endpoint's circuit is open, or another delivery probes
	ReasonConcurrency = "concurrency"  // its endpoint has MaxInFlight requests in flight
)

// NoSlot is the slot of a ticket that holds no concurrency slot: its
// endpoint has no cap.
const NoSlot = -1

// LeaseGrace is how long a lease or a probe outlives its request's
// timeout, to cover recording the attempt. A worker that dies holding a
// lease blocks its slot for at most the endpoint's timeout plus this.
const LeaseGrace = 5 * time.Second

// statementTimeout bounds the statements that take or give back a slot,
// which run to their end even when the job's context has ended.
const statementTimeout = 10 * time.Second

// Caps of the waits that grow with a job's snooze count.
const (
	// maxBusyWait caps the wait of a delivery whose endpoint is at its
	// concurrency cap, so that a large backlog polls slowly.
	maxBusyWait = time.Minute
	// maxDBErrorWait caps the wait after a transient database error.
	maxDBErrorWait = 10 * time.Second
)

// Defaults of the Config fields that have one.
const (
	DefaultBusyRetryDelay            = time.Second
	DefaultCircuitBreakerCooldown    = 30 * time.Second
	DefaultCircuitBreakerMaxCooldown = 10 * time.Minute
)

// Config configures a Gate; its fields are outbox.Config's of the same
// names, which document them.
type Config struct {
	// BusyRetryDelay is the first wait at the cap, behind another probe,
	// and after a transient database error. Defaults to
	// DefaultBusyRetryDelay.
	BusyRetryDelay time.Duration
	// CircuitBreakerThreshold below 0 disables the breaker: Circuit lets
	// every delivery go. (The record counts the failures.)
	CircuitBreakerThreshold int
	// CircuitBreakerCooldown and CircuitBreakerMaxCooldown time the
	// circuit's cool-downs (Cooldown). Default to
	// DefaultCircuitBreakerCooldown and DefaultCircuitBreakerMaxCooldown.
	CircuitBreakerCooldown    time.Duration
	CircuitBreakerMaxCooldown time.Duration
	// Logger receives a line when a slot or probe cannot be given back.
	// Defaults to slog.Default().
	Logger *slog.Logger
}

// Gate admits attempts. It is safe for concurrent use.
type Gate struct {
	config  Config
	queries *dbsqlc.Queries
	// slots takes the first try's slot of the deliveries of a node that
	// ask at the same time in one statement.
	slots *groupcommit.Batcher[slotAsk, int32]
	// freed wakes deliveries waiting at an endpoint's cap (atCap) when an
	// attempt of this node gives a slot back.
	freed slotWaiters
	// capWait is the constant capWait; tests lengthen it where a loaded
	// machine may take longer to give a slot back.
	capWait time.Duration
}

// New returns the Gate of cfg (nil: every default) on pool.
func New(pool *pgxpool.Pool, cfg *Config) *Gate {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.BusyRetryDelay = cmp.Or(c.BusyRetryDelay, DefaultBusyRetryDelay)
	c.CircuitBreakerCooldown = cmp.Or(c.CircuitBreakerCooldown, DefaultCircuitBreakerCooldown)
	c.CircuitBreakerMaxCooldown = cmp.Or(c.CircuitBreakerMaxCooldown, max(DefaultCircuitBreakerMaxCooldown, c.CircuitBreakerCooldown))
	c.Logger = cmp.Or(c.Logger, slog.Default())
	g := &Gate{config: c, queries: dbsqlc.New(pool), capWait: capWait}
	g.slots = groupcommit.New(groupcommit.Config[slotAsk]{MaxSize: combineMax, Slots: combineSlots, Timeout: statementTimeout}, g.takeSlots)
	return g
}

// Deferral is Admit's answer when an attempt must wait: the job is
// snoozed for Wait, using no attempt, for Reason (a deferral reason).
type Deferral struct {
	Reason string
	Wait   time.Duration
}

// Error says what the attempt waits for.
func (d *Deferral) Error() string {
	return fmt.Sprintf("outbox: deferred (%s) for %s", d.Reason, d.Wait)
}

func deferred(reason string, wait time.Duration) *Deferral {
	return &Deferral{Reason: reason, Wait: max(wait, time.Millisecond)}
}

// Circuit reads the circuit of d's endpoint as loaded: how long its
// delivery must wait (the circuit is open, or another delivery probes),
// or whether it may try to become the probe. A closed circuit, or a
// disabled breaker, lets it go. Times are the database's clock (d.DBNow).
func (g *Gate) Circuit(d *outboxtype.Delivery) (wait time.Duration, probe bool) {
	if g.config.CircuitBreakerThreshold < 0 {
		return 0, false
	}
	switch d.CircuitState {
	case outboxtype.CircuitOpen:
		if d.CircuitOpenUntil != nil && d.CircuitOpenUntil.After(d.DBNow) {
			// Jitter spreads the wake-ups of a backlog; the first to wake
			// probes.
			return withJitter(d.CircuitOpenUntil.Sub(d.DBNow)), false
		}
		return 0, true
	case outboxtype.CircuitHalfOpen:
		if d.CircuitProbeExpiresAt != nil && d.CircuitProbeExpiresAt.After(d.DBNow) {
			return g.Busy(), false
		}
		return 0, true
	}
	return 0, false
}

// Request is what an attempt asks Admit for.
type Request struct {
	// Hold is how long the attempt may hold its slot and probe: its
	// request's timeout (and, for a batch, its span); each is held
	// LeaseGrace longer, to cover the record.
	Hold time.Duration
	// Probe makes the delivery its endpoint's probe first (Circuit said
	// it may).
	Probe bool
	// Snoozes is how often the job was snoozed: at its endpoint's cap, a
	// delivery waits longer each time.
	Snoozes int
}

// Admit decides whether the attempt of d may go: it claims the circuit's
// probe when req says so, then takes a concurrency slot under the
// endpoint's cap and a token of its rate limit, as the endpoint has them.
// It returns the Ticket that holds them, a *Deferral when the attempt must
// wait (having given back what it took), or another error (a database
// error, nothing held). A delivery whose turn for a token has come goes
// before those that have not waited.
func (g *Gate) Admit(ctx context.Context, d *outboxtype.Delivery, req Request) (*Ticket, error) {
	t := &Ticket{gate: g, ctx: context.WithoutCancel(ctx), endpointID: d.EndpointID, deliveryID: d.ID, slot: NoSlot}
	if req.Probe {
		probe, ok, err := g.claimProbe(ctx, d, req.Hold)
		switch {
		case err != nil:
			return nil, fmt.Errorf("claim the circuit's probe: %w", err)
		case !ok:
			return nil, deferred(ReasonCircuit, g.Busy())
		}
		t.probe = probe
	}
	err := g.admit(ctx, d, req, t)
	if err != nil {
		t.Release()
		if d := (*Deferral)(nil); !errors.As(err, &d) {
			err = fmt.Errorf("take a concurrency slot and rate limit token: %w", err)
		}
		return nil, err
	}
	return t, nil
}

// admit takes the slot and token of t's attempt, or says how long to wait.
func (g *Gate) admit(ctx context.Context, d *outboxtype.Delivery, req Request, t *Ticket) error {
	queued, early := turn(d)
	if early > 0 {
		return deferred(ReasonRateLimit, early)
	}
	if d.MaxInFlight > 0 {
		return g.acquireLease(ctx, d, req, queued, t)
	}
	if d.RateLimitPerSecond > 0 {
		return g.takeToken(ctx, d, queued, false, t)
	}
	return nil
}

// turn reads a delivery's turn for a token: queued when it has come (the
// delivery then goes before those that have not waited), else how long to
// snooze first when it is more than rateMaxSleep away.
func turn(d *outboxtype.Delivery) (queued bool, early time.Duration) {
	if d.ThrottledUntil == nil {
		return false, 0
	}
	if in := d.ThrottledUntil.Sub(d.DBNow); in > rateMaxSleep {
		return false, turnWake(in)
	}
	return true, 0
}

// Busy returns how long to snooze a delivery that must wait its turn (for
// an ordered predecessor, for another delivery's probe): BusyRetryDelay
// plus up to 25% jitter.
func (g *Gate) Busy() time.Duration { return withJitter(g.config.BusyRetryDelay) }

// capped returns how long to snooze a delivery whose endpoint is at its
// concurrency cap, after snoozes earlier snoozes: BusyRetryDelay doubled
// per snooze up to maxBusyWait, plus up to 25% jitter. A large backlog
// for a capped endpoint thus polls the database a few times a minute per
// delivery, not every second.
func (g *Gate) capped(snoozes int) time.Duration {
	return withJitter(grown(g.config.BusyRetryDelay, snoozes, maxBusyWait))
}

// AfterDatabaseError returns how long to snooze a delivery after a
// transient database error, after snoozes earlier snoozes: BusyRetryDelay
// doubled per snooze up to maxDBErrorWait, plus up to 25% jitter.
func (g *Gate) AfterDatabaseError(snoozes int) time.Duration {
	return withJitter(grown(g.config.BusyRetryDelay, snoozes, maxDBErrorWait))
}

// beyondHorizon returns how long to snooze a delivery whose rate limit
// token would be due d after rateHorizon: d, at least BusyRetryDelay and
// at most maxBusyWait, plus up to 25% jitter. It then asks again, so a
// backlog beyond the horizon polls a few times a minute per delivery, as
// at the concurrency cap.
func (g *Gate) beyondHorizon(d time.Duration) time.Duration {
	return withJitter(min(max(d, g.config.BusyRetryDelay), maxBusyWait))
}

// Cooldown returns the cool-down after the circuit's opening number
// openings (from 1) since it was last closed: CircuitBreakerCooldown
// doubled per earlier opening, at most CircuitBreakerMaxCooldown.
// OutboxAttemptRecord computes the same in SQL; this one is for logs.
func (g *Gate) Cooldown(openings int) time.Duration {
	return grown(g.config.CircuitBreakerCooldown, max(openings-1, 0), g.config.CircuitBreakerMaxCooldown)
}

// grown returns base doubled n times, at most limit (and at least base).
func grown(base time.Duration, n int, limit time.Duration) time.Duration {
	d := base
	for range n {
		if d >= limit/2 {
			return max(limit, base)
		}
		d *= 2
	}
	return min(d, max(limit, base))
}

// withJitter adds up to 25% to d.
func withJitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/4+1)) //nolint:gosec // jitter needs no crypto
}

// Ticket is what an admitted attempt holds: its endpoint's circuit probe,
// a concurrency slot (NoSlot for none), and the wait for its rate limit
// token. Defer Release right after Admit: it gives back whatever the
// attempt's record did not settle.
type Ticket struct {
	gate *Gate
	// ctx is Admit's, without its cancellation: a ticket is given back
	// even when the job's context has ended (the client stopping).
	ctx                    context.Context
	endpointID, deliveryID uuid.UUID
	slot                   int32
	sleep                  time.Duration
	probe                  bool
	// recorded: the attempt's record freed the slot. judged: the request
	// went out with a verdict on the endpoint, which the record settles
	// the probe with (or the probe expires).
	recorded, judged bool
}

// Slot is the slot the ticket holds, NoSlot for none (a nil ticket: an
// attempt never admitted): the record frees it.
func (t *Ticket) Slot() int32 {
	if t == nil {
		return NoSlot
	}
	return t.slot
}

// Probe reports whether the attempt is its endpoint's circuit probe.
func (t *Ticket) Probe() bool { return t.probe }

// AwaitToken waits in the worker for the rate limit token the ticket took,
// or until ctx ends; it returns ctx's error at once when ctx has ended
// (Admit's statements run to their end regardless), so that nothing is
// sent after a stop.
func (t *Ticket) AwaitToken(ctx context.Context) error {
	if t.sleep <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(t.sleep)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Sent says the request went out: with a verdict on the endpoint, the
// record settles the probe (or it expires after the attempt's timeout);
// without one (the client's stop cut the request off), Release gives it
// back.
func (t *Ticket) Sent(verdict bool) { t.judged = verdict }

// Recorded says the attempt's record freed the slot.
func (t *Ticket) Recorded() {
	if t != nil {
		t.recorded = true
		if t.slot != NoSlot {
			t.gate.freed.given(t.endpointID)
		}
	}
}

// Release gives back what the ticket still holds: the slot unless the
// record freed it, the probe unless the record settles it. Giving back
// fails only in the logs: a slot frees itself when its lease expires, a
// probe when its time is up. A nil ticket holds nothing.
func (t *Ticket) Release() {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(t.ctx, statementTimeout)
	defer cancel()
	if !t.recorded && t.slot != NoSlot {
		t.recorded = true
		t.gate.releaseSlot(ctx, t.endpointID, t.deliveryID, t.slot)
	}
	if t.probe && !t.judged {
		t.probe = false
		t.gate.releaseProbe(ctx, t.endpointID, t.deliveryID)
	}
}
