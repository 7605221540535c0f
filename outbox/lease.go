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

// acquireLease takes one of the endpoint's MaxInFlight slots for a
// delivery, for as long as its attempt may take. It reports false when the
// endpoint has as many live leases as its cap (or was deleted), and true
// with noLease when the endpoint's cap was lifted meanwhile.
//
// The cap holds across processes because a slot is a row that one worker at
// a time can take (FOR UPDATE SKIP LOCKED: workers never queue behind one
// another). Leases expire instead of relying on their holder to release
// them, so a crashed worker's slot frees itself; no lock or transaction is
// held while the request is in flight. Expiry is set and judged by the
// database's clock, so nodes whose clocks disagree (or tests that set
// Config.Now) still agree on which slots are free.
//
// The cap is read from the endpoint's row at each try. When it was lowered
// while more requests than the new cap were in flight, their leases hold
// slots at or above it: until they end, slots are taken by
// OutboxLeaseAcquireCounted, which counts every live lease, one worker at
// a time, so no request starts while the new cap's worth are in flight.
func (o *Outbox) acquireLease(ctx context.Context, endpointID, deliveryID uuid.UUID, timeout time.Duration) (int32, bool, error) {
	leaseSeconds := (timeout + leaseGrace).Seconds()
	for range acquireTries {
		slot, err := o.queries.OutboxLeaseAcquire(ctx, dbsqlc.OutboxLeaseAcquireParams{
			EndpointID: endpointID, DeliveryID: deliveryID, LeaseSeconds: leaseSeconds,
		})
		if !errors.Is(err, pgx.ErrNoRows) {
			return leaseTaken(slot, err)
		}
		count, err := o.queries.OutboxLeaseCount(ctx, endpointID)
		if errors.Is(err, pgx.ErrNoRows) {
			// Deleted with its deliveries: the job's next run ends it.
			return noLease, false, nil
		}
		if err != nil {
			return noLease, false, err
		}
		switch {
		case count.MaxInFlight == 0:
			// The cap was lifted since the delivery was loaded.
			return noLease, true, nil
		case count.Held >= int64(count.MaxInFlight):
			return noLease, false, nil
		case count.Slots < int64(count.MaxInFlight):
			// First use of the endpoint, or its cap was raised.
			err := o.queries.OutboxLeaseSlotsCreate(ctx, dbsqlc.OutboxLeaseSlotsCreateParams{
				EndpointID: endpointID, LastSlot: count.MaxInFlight - 1,
			})
			if err != nil {
				return noLease, false, err
			}
		case count.HeldAbove > 0:
			slot, err := o.queries.OutboxLeaseAcquireCounted(ctx, dbsqlc.OutboxLeaseAcquireCountedParams{
				EndpointID: endpointID, DeliveryID: deliveryID, LeaseSeconds: leaseSeconds,
			})
			if !errors.Is(err, pgx.ErrNoRows) {
				return leaseTaken(slot, err)
			}
			return noLease, false, nil
		}
	}
	return noLease, false, nil
}

// leaseTaken is acquireLease's answer after a statement that took slot or
// failed with err.
func leaseTaken(slot int32, err error) (int32, bool, error) {
	if err != nil {
		return noLease, false, err
	}
	return slot, true, nil
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
