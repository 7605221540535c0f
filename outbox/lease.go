package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

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
// delivery, for as long as its attempt may take, and for a rate-limited
// endpoint a token of its rate limit with it (queued: the delivery's turn
// for one has come). It admits with the slot, with noLease when the
// endpoint's cap was lifted meanwhile, or says how long to wait: the
// endpoint has as many live leases as its cap (or was deleted), or no
// token is due.
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
func (o *Outbox) acquireLease(ctx context.Context, job *river.Job[DeliveryArgs], row *dbsqlc.OutboxDeliveryGetForWorkRow,
	timeout time.Duration, queued bool,
) (admission, error) {
	lease := timeout + leaseGrace
	if row.RateLimitPerSecond > 0 {
		lease += rateMaxSleep // the slot is held while the token is awaited
	}
	for range acquireTries {
		res, err := o.leaseAcquire(ctx, row, lease, queued)
		switch {
		case err != nil:
			return admission{}, err
		case res.Slot != noLease || (res.SlotFree && res.RateLimited && !res.BucketMissing):
			return o.tokenAnswer(ctx, row, &rateTake{
				slot: res.Slot, rateLimited: res.RateLimited, tokenGranted: res.TokenGranted,
				ticketed: res.Ticketed, wait: seconds(res.WaitSeconds),
			})
		case res.BucketMissing:
			if err := o.queries.OutboxRateBucketCreate(ctx, row.EndpointID); err != nil {
				return admission{}, err
			}
			continue
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
			return o.takeToken(ctx, row, queued, false)
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
			return o.acquireCounted(ctx, job, row, lease.Seconds(), queued)
		}
	}
	return o.atCap(ctx, job, row, queued)
}

// leaseAcquire takes a free slot, with a token when the endpoint has a
// rate limit (OutboxLeaseAcquireWithToken); an endpoint without one when
// its delivery was loaded takes the slot alone (OutboxLeaseAcquire, which
// reads no bucket: the hot path of most endpoints), so a limit set since
// applies from the delivery's next run.
func (o *Outbox) leaseAcquire(ctx context.Context, row *dbsqlc.OutboxDeliveryGetForWorkRow, lease time.Duration, queued bool,
) (dbsqlc.OutboxLeaseAcquireWithTokenRow, error) {
	if row.RateLimitPerSecond > 0 {
		return o.queries.OutboxLeaseAcquireWithToken(ctx, dbsqlc.OutboxLeaseAcquireWithTokenParams{
			EndpointID: row.EndpointID, DeliveryID: row.ID, LeaseSeconds: lease.Seconds(), Queued: queued,
			MaxSleepSeconds: rateMaxSleep.Seconds(), MaxSleepers: rateMaxSleepers, HorizonSeconds: rateHorizon.Seconds(),
		})
	}
	slot, err := o.queries.OutboxLeaseAcquire(ctx, dbsqlc.OutboxLeaseAcquireParams{
		EndpointID: row.EndpointID, DeliveryID: row.ID, LeaseSeconds: lease.Seconds(),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return dbsqlc.OutboxLeaseAcquireWithTokenRow{Slot: noLease}, nil
	}
	return dbsqlc.OutboxLeaseAcquireWithTokenRow{Slot: slot}, err
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
func (o *Outbox) atCap(ctx context.Context, job *river.Job[DeliveryArgs], row *dbsqlc.OutboxDeliveryGetForWorkRow, queued bool) (admission, error) {
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

// acquireCounted takes a slot with OutboxLeaseAcquireCounted, then a
// token (takeToken admits at once when the endpoint has no rate limit):
// the slot is given back when no token is due soon.
func (o *Outbox) acquireCounted(ctx context.Context, job *river.Job[DeliveryArgs], row *dbsqlc.OutboxDeliveryGetForWorkRow,
	leaseSeconds float64, queued bool,
) (admission, error) {
	slot, err := o.queries.OutboxLeaseAcquireCounted(ctx, dbsqlc.OutboxLeaseAcquireCountedParams{
		EndpointID: row.EndpointID, DeliveryID: row.ID, LeaseSeconds: leaseSeconds,
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return o.atCap(ctx, job, row, queued)
	case err != nil:
		return admission{}, err
	}
	token, err := o.takeToken(ctx, row, queued, false)
	if err != nil || token.wait > 0 {
		o.releaseLease(ctx, row.EndpointID, row.ID, slot)
		return token, err
	}
	token.slot = slot
	return token, nil
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
