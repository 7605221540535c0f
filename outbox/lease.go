package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// leaseGrace is how long a lease outlives its request's timeout, to cover
// recording the attempt. A worker that dies holding a lease blocks its slot
// for at most the endpoint's timeout plus this.
const leaseGrace = 5 * time.Second

// noLease is the slot of an attempt that holds no lease (uncapped endpoint).
const noLease = -1

// acquireTries bounds how often acquireLease looks again when free slots
// were all being taken by other workers at that moment, or had to be
// created.
const acquireTries = 3

// acquireLease takes one of the endpoint's maxInFlight slots for a delivery,
// for as long as its attempt may take. It reports false when every slot is
// held by a live lease.
//
// The cap holds across processes because a slot is a row that one worker at
// a time can take (FOR UPDATE SKIP LOCKED: workers never queue behind one
// another). Leases expire instead of relying on their holder to release
// them, so a crashed worker's slot frees itself; no lock or transaction is
// held while the request is in flight. Expiry is set and judged by the
// database's clock, so nodes whose clocks disagree (or tests that set
// Config.Now) still agree on which slots are free.
func (o *Outbox) acquireLease(ctx context.Context, endpointID, deliveryID uuid.UUID, maxInFlight int32, timeout time.Duration) (int32, bool, error) {
	lastSlot := maxInFlight - 1
	for range acquireTries {
		slot, err := o.queries.OutboxLeaseAcquire(ctx, dbsqlc.OutboxLeaseAcquireParams{
			EndpointID:   endpointID,
			DeliveryID:   deliveryID,
			LeaseSeconds: (timeout + leaseGrace).Seconds(),
			LastSlot:     lastSlot,
		})
		if err == nil {
			return slot, true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return noLease, false, err
		}
		count, err := o.queries.OutboxLeaseCount(ctx, dbsqlc.OutboxLeaseCountParams{EndpointID: endpointID, LastSlot: lastSlot})
		if err != nil {
			return noLease, false, err
		}
		switch {
		case count.Slots < int64(maxInFlight):
			// First use of the endpoint, or its cap was raised.
			err := o.queries.OutboxLeaseSlotsCreate(ctx, dbsqlc.OutboxLeaseSlotsCreateParams{EndpointID: endpointID, LastSlot: lastSlot})
			if err != nil {
				return noLease, false, err
			}
		case count.Held >= int64(maxInFlight):
			return noLease, false, nil
		}
	}
	return noLease, false, nil
}

// releaseLease frees a slot outside an attempt's recording (which frees it
// itself), such as when the worker is stopping.
func (o *Outbox) releaseLease(ctx context.Context, endpointID, deliveryID uuid.UUID, slot int32) {
	if slot == noLease {
		return
	}
	err := o.queries.OutboxLeaseRelease(ctx, dbsqlc.OutboxLeaseReleaseParams{EndpointID: endpointID, Slot: slot, DeliveryID: deliveryID})
	if err != nil {
		o.config.Logger.WarnContext(ctx, "outbox: release concurrency slot; it frees itself when it expires",
			"endpoint_id", endpointID, "delivery_id", deliveryID, "error", err)
	}
}
