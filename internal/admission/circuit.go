package admission

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/outboxtype"
)

// claimProbe makes d's delivery the probe of its endpoint's circuit, for
// hold and LeaseGrace. ok is false when another delivery probes; probe is
// false (and ok true) when the circuit closed meanwhile.
func (g *Gate) claimProbe(ctx context.Context, d *outboxtype.Delivery, hold time.Duration) (probe, ok bool, err error) {
	closed, err := g.queries.OutboxCircuitProbeClaim(ctx, dbsqlc.OutboxCircuitProbeClaimParams{
		EndpointID: d.EndpointID, DeliveryID: d.ID, ProbeSeconds: (hold + LeaseGrace).Seconds(),
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, false, nil
	case err != nil:
		return false, false, err
	}
	return !closed, true, nil
}

// releaseProbe gives up the probe of a delivery that was not sent (or
// whose request was cut off), so that another delivery may probe at once.
// Failing that, the probe expires after the attempt's timeout.
func (g *Gate) releaseProbe(ctx context.Context, endpointID, deliveryID uuid.UUID) {
	err := g.queries.OutboxCircuitProbeRelease(ctx, dbsqlc.OutboxCircuitProbeReleaseParams{EndpointID: endpointID, DeliveryID: deliveryID})
	if err != nil {
		g.config.Logger.WarnContext(ctx, "outbox: release circuit probe; it expires after the attempt's timeout",
			"endpoint_id", endpointID, "delivery_id", deliveryID, "error", err)
	}
}
