package outbox

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/outboxtype"
)

// CircuitState is where an endpoint's circuit breaker stands.
//
// After Config.CircuitBreakerThreshold consecutive failed attempts the
// circuit opens: the endpoint's deliveries wait (snoozed, without using an
// attempt) for a cool-down. Then one delivery, across every process,
// probes the endpoint (half-open): its success closes the circuit and the
// others follow; its failure opens it again for a cool-down twice as long,
// up to Config.CircuitBreakerMaxCooldown.
type CircuitState string

// Circuit states.
const (
	// CircuitClosed: deliveries go as usual.
	CircuitClosed CircuitState = outboxtype.CircuitClosed
	// CircuitOpen: deliveries wait until Endpoint.CircuitOpenUntil.
	CircuitOpen CircuitState = outboxtype.CircuitOpen
	// CircuitHalfOpen: the cool-down is over and one delivery probes the
	// endpoint; the others wait for its outcome.
	CircuitHalfOpen CircuitState = outboxtype.CircuitHalfOpen
)

// circuitGate reads the circuit of row's endpoint: how long its delivery
// must wait (the circuit is open, or another delivery probes), or whether
// it may try to become the probe. A closed circuit, or a disabled breaker,
// lets it go. Times are the database's clock (row.DBNow).
func (o *Outbox) circuitGate(row *outboxtype.Delivery) (wait time.Duration, probe bool) {
	if o.config.CircuitBreakerThreshold < 0 {
		return 0, false
	}
	switch CircuitState(row.CircuitState) {
	case CircuitOpen:
		if row.CircuitOpenUntil != nil && row.CircuitOpenUntil.After(row.DBNow) {
			// Jitter spreads the wake-ups of a backlog; the first to wake
			// probes.
			return withJitter(row.CircuitOpenUntil.Sub(row.DBNow)), false
		}
		return 0, true
	case CircuitHalfOpen:
		if row.CircuitProbeExpiresAt != nil && row.CircuitProbeExpiresAt.After(row.DBNow) {
			return o.retries.busy(), false
		}
		return 0, true
	}
	return 0, false
}

// claimProbe makes row's delivery the probe of its endpoint's circuit, for
// as long as an attempt may take. ok is false when another delivery
// probes; probe is false (and ok true) when the circuit closed meanwhile.
func (o *Outbox) claimProbe(ctx context.Context, row *outboxtype.Delivery, timeout time.Duration) (probe, ok bool, err error) {
	closed, err := o.queries.OutboxCircuitProbeClaim(ctx, dbsqlc.OutboxCircuitProbeClaimParams{
		EndpointID: row.EndpointID, DeliveryID: row.ID, ProbeSeconds: (timeout + leaseGrace).Seconds(),
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, false, nil
	case err != nil:
		return false, false, err
	}
	return !closed, true, nil
}

// releaseProbe gives up the probe of row's delivery, which was not sent,
// so that another delivery may probe at once. Failing that, the probe
// expires after the attempt's timeout.
func (o *Outbox) releaseProbe(ctx context.Context, row *outboxtype.Delivery) {
	err := o.queries.OutboxCircuitProbeRelease(ctx, dbsqlc.OutboxCircuitProbeReleaseParams{EndpointID: row.EndpointID, DeliveryID: row.ID})
	if err != nil {
		o.config.Logger.WarnContext(ctx, "outbox: release circuit probe; it expires after the attempt's timeout",
			"endpoint_id", row.EndpointID, "delivery_id", row.ID, "error", err)
	}
}

// circuitChanged logs and counts an attempt's change of its endpoint's
// circuit.
func (o *Outbox) circuitChanged(ctx context.Context, log *slog.Logger, row *outboxtype.Delivery, changed *recorded) {
	switch {
	case changed.circuitOpened:
		o.metrics.openings.Add(ctx, 1, o.metrics.byEndpoint.Of(row.EndpointID.String()))
		log.WarnContext(ctx, "outbox: circuit opened; the endpoint's deliveries wait without using attempts",
			"openings", changed.circuitOpenings, "cooldown", o.config.circuitCooldown(changed.circuitOpenings))
	case changed.circuitClosed:
		log.InfoContext(ctx, "outbox: circuit closed")
	}
}

// circuitCooldown returns the cool-down after the circuit's opening number
// openings (from 1) since it was last closed: Config.CircuitBreakerCooldown
// doubled per earlier opening, at most Config.CircuitBreakerMaxCooldown.
// OutboxAttemptRecord computes the same in SQL; this one is for logs.
func (c *Config) circuitCooldown(openings int) time.Duration {
	return grown(c.CircuitBreakerCooldown, max(openings-1, 0), c.CircuitBreakerMaxCooldown)
}
