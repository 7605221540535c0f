package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/outboxtype"
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
// delivery, for as long as its attempt may take, then, for a rate-limited
// endpoint, a token of its rate limit (queued: the delivery's turn for one
// has come); a slot without a token is given back. It admits with the
// slot, with noLease when the endpoint's cap was lifted meanwhile, or says
// how long to wait: the endpoint has as many live leases as its cap (or
// was deleted), or no token is due.
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
//
// Its statements run to their end even when ctx ends meanwhile (the client
// stopping): one cut short by its client goes on in the server, and may
// take a slot there that nobody then gives back before its lease expires.
// The caller, seeing ctx ended, gives back the slot it is admitted with.
func (o *Outbox) acquireLease(ctx context.Context, job *river.Job[DeliveryArgs], row *outboxtype.Delivery,
	timeout time.Duration, queued bool,
) (admission, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	lease := timeout + leaseGrace
	if row.RateLimitPerSecond > 0 {
		lease += rateMaxSleep // the slot is held while the token is awaited
	}
	for try := range acquireTries {
		var slot int32
		var err error
		if try == 0 {
			// With the deliveries of the node asking at the same time.
			slot, err = o.takeSlot(ctx, leaseAsk{endpointID: row.EndpointID, deliveryID: row.ID, seconds: lease.Seconds()})
			if err == nil && slot == noLease {
				err = pgx.ErrNoRows
			}
		} else {
			slot, err = o.queries.OutboxLeaseAcquire(ctx, dbsqlc.OutboxLeaseAcquireParams{
				EndpointID: row.EndpointID, DeliveryID: row.ID, LeaseSeconds: lease.Seconds(),
			})
		}
		if err == nil {
			return o.withToken(ctx, row, slot, queued)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return admission{}, err
		}
		count, err := o.queries.OutboxLeaseCount(ctx, row.EndpointID)
		if errors.Is(err, pgx.ErrNoRows) {
			// Deleted with its deliveries: the job's next run ends it.
			return o.busy(job), nil
		}
		if err != nil {
			return admission{}, err
		}
		switch {
		case count.MaxInFlight == 0:
			// The cap was lifted since the delivery was loaded.
			return o.withToken(ctx, row, noLease, queued)
		case count.Held >= int64(count.MaxInFlight):
			return o.atCap(ctx, job, row, queued)
		case count.Slots < int64(count.MaxInFlight):
			// First use of the endpoint, or its cap was raised.
			err := o.queries.OutboxLeaseSlotsCreate(ctx, dbsqlc.OutboxLeaseSlotsCreateParams{
				EndpointID: row.EndpointID, LastSlot: count.MaxInFlight - 1,
			})
			if err != nil {
				return admission{}, err
			}
		case count.HeldAbove > 0:
			slot, err := o.queries.OutboxLeaseAcquireCounted(ctx, dbsqlc.OutboxLeaseAcquireCountedParams{
				EndpointID: row.EndpointID, DeliveryID: row.ID, LeaseSeconds: lease.Seconds(),
			})
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				return o.atCap(ctx, job, row, queued)
			case err != nil:
				return admission{}, err
			}
			return o.withToken(ctx, row, slot, queued)
		}
	}
	return o.atCap(ctx, job, row, queued)
}

// withToken admits the attempt of row with slot (noLease: none) once it
// has a token of its endpoint's rate limit, if the endpoint had one when
// the delivery was loaded (a limit set since applies from its next run).
// Without a token due soon the slot is given back at once, and the
// delivery waits for its turn.
func (o *Outbox) withToken(ctx context.Context, row *outboxtype.Delivery, slot int32, queued bool) (admission, error) {
	if row.RateLimitPerSecond == 0 {
		return admitted(slot), nil
	}
	token, err := o.takeToken(ctx, row, queued, false)
	if err != nil || token.wait > 0 {
		o.releaseLease(ctx, row.EndpointID, row.ID, slot)
		return token, err
	}
	token.slot = slot
	return token, nil
}

// busy is the admission of a delivery whose endpoint is at its cap: a
// snooze of BusyRetryDelay doubled per earlier snooze of its job.
func (o *Outbox) busy(job *river.Job[DeliveryArgs]) admission {
	return deferred(deferConcurrency, o.retries.capped(snoozeCount(job)))
}

// atCap is the admission of a delivery whose endpoint is at its cap. A
// rate-limited endpoint's delivery waits for its turn for a token (at
// least BusyRetryDelay), so that its backlog comes back at the limit's
// pace; any other polls less often the longer it waits (busy).
func (o *Outbox) atCap(ctx context.Context, job *river.Job[DeliveryArgs], row *outboxtype.Delivery, queued bool) (admission, error) {
	if row.RateLimitPerSecond == 0 {
		return o.busy(job), nil
	}
	a, err := o.takeToken(ctx, row, queued, true)
	if err != nil || a.wait == 0 {
		// No limit any more: as any other endpoint.
		return o.busy(job), err
	}
	a.wait, a.reason = max(a.wait, o.retries.busy()), deferConcurrency
	return a, nil
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
