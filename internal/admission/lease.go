package admission

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/outboxtype"
)

// acquireTries bounds how often acquireLease looks again when free slots
// were all being taken by other workers at that moment, or had to be
// created.
const acquireTries = 3

// The first try's slot is taken in one statement for the deliveries of a
// node that ask at the same time (groupcommit): under load this takes the
// database's work per delivery, and the connections the workers hold,
// down by the size of the batches; a lone delivery runs its statement at
// once.
const (
	// combineMax bounds the deliveries of one statement.
	combineMax = 64
	// combineSlots is how many such statements run at once.
	combineSlots = 2
)

// acquireLease takes one of the endpoint's MaxInFlight slots for a
// delivery, for as long as its attempt may take, into t, then, for a
// rate-limited endpoint, a token of its rate limit (queued: the
// delivery's turn for one has come); a slot without a token is given back
// (by Admit, which releases t). It leaves t without a slot when the
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
//
// Its statements run to their end even when ctx ends meanwhile (the client
// stopping): one cut short by its client goes on in the server, and may
// take a slot there that nobody then gives back before its lease expires.
// The caller, seeing ctx ended, releases the ticket, which gives the slot
// back.
func (g *Gate) acquireLease(ctx context.Context, d *outboxtype.Delivery, req Request, queued bool, t *Ticket) error {
	jobCtx := ctx // ends with the job: a wait at the cap ends with it
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statementTimeout)
	defer cancel()
	lease := req.Hold + LeaseGrace
	if d.RateLimitPerSecond > 0 {
		lease += rateMaxSleep // the slot is held while the token is awaited
	}
	for try := range acquireTries {
		var slot int32
		var err error
		if try == 0 {
			// With the deliveries of the node asking at the same time.
			slot, err = g.slots.Do(ctx, slotAsk{endpointID: d.EndpointID, deliveryID: d.ID, seconds: lease.Seconds()})
			if err == nil && slot == NoSlot {
				err = pgx.ErrNoRows
			}
		} else {
			slot, err = g.queries.OutboxLeaseAcquire(ctx, dbsqlc.OutboxLeaseAcquireParams{
				EndpointID: d.EndpointID, DeliveryID: d.ID, LeaseSeconds: lease.Seconds(),
			})
		}
		if err == nil {
			t.slot = slot
			return g.withToken(ctx, d, queued, t)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		count, err := g.queries.OutboxLeaseCount(ctx, d.EndpointID)
		if errors.Is(err, pgx.ErrNoRows) {
			// Deleted with its deliveries: the job's next run ends it.
			return deferred(ReasonConcurrency, g.capped(req.Snoozes))
		}
		if err != nil {
			return err
		}
		switch {
		case count.MaxInFlight == 0:
			// The cap was lifted since the delivery was loaded.
			return g.withToken(ctx, d, queued, t)
		case count.Held >= int64(count.MaxInFlight):
			return g.atCap(ctx, jobCtx, d, req, queued, t)
		case count.Slots < int64(count.MaxInFlight):
			// First use of the endpoint, or its cap was raised.
			err := g.queries.OutboxLeaseSlotsCreate(ctx, dbsqlc.OutboxLeaseSlotsCreateParams{
				EndpointID: d.EndpointID, LastSlot: count.MaxInFlight - 1,
			})
			if err != nil {
				return err
			}
		case count.HeldAbove > 0:
			slot, err := g.queries.OutboxLeaseAcquireCounted(ctx, dbsqlc.OutboxLeaseAcquireCountedParams{
				EndpointID: d.EndpointID, DeliveryID: d.ID, LeaseSeconds: lease.Seconds(),
			})
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				return g.atCap(ctx, jobCtx, d, req, queued, t)
			case err != nil:
				return err
			}
			t.slot = slot
			return g.withToken(ctx, d, queued, t)
		}
	}
	return g.atCap(ctx, jobCtx, d, req, queued, t)
}

// withToken admits the attempt of d with t's slot (if any) once it has a
// token of its endpoint's rate limit, if the endpoint had one when the
// delivery was loaded (a limit set since applies from its next run).
// Without a token due soon the attempt waits for its turn, and Admit
// gives the slot back at once.
func (g *Gate) withToken(ctx context.Context, d *outboxtype.Delivery, queued bool, t *Ticket) error {
	if d.RateLimitPerSecond == 0 {
		return nil
	}
	return g.takeToken(ctx, d, queued, false, t)
}

// atCap is the answer to a delivery whose endpoint is at its cap. A
// rate-limited endpoint's delivery waits for its turn for a token (at
// least BusyRetryDelay), so that its backlog comes back at the limit's
// pace; any other polls less often the longer it waits (capped).
func (g *Gate) atCap(ctx, jobCtx context.Context, d *outboxtype.Delivery, req Request, queued bool, t *Ticket) error {
	busy := deferred(ReasonConcurrency, g.capped(req.Snoozes))
	if d.RateLimitPerSecond == 0 {
		got, err := g.awaitFreedSlot(jobCtx, d, req, t)
		if err != nil || got {
			return err
		}
		return busy
	}
	err := g.takeToken(ctx, d, queued, true, t)
	var turn *Deferral
	if !errors.As(err, &turn) {
		// No limit any more (a token was "taken": no wait): as any other
		// endpoint; or a database error.
		if err != nil {
			return err
		}
		return busy
	}
	turn.Wait, turn.Reason = max(turn.Wait, g.Busy()), ReasonConcurrency
	return turn
}

// capWait bounds how long a delivery at its endpoint's cap waits in its
// worker for a slot that an attempt of this node gives back, before its job
// is snoozed (BusyRetryDelay, 1 s by default, then longer). A fast
// endpoint frees a slot within milliseconds; a snooze made a burst at a
// rate the endpoint absorbs wait seconds (p99 3.6 s at 200 events/s).
const capWait = 100 * time.Millisecond

// maxCapWaiters bounds the deliveries of one endpoint waiting at its cap
// on one node (and the cap itself does, when lower): each holds a River
// worker meanwhile, and the endpoints past their cap must not take every
// worker from the others.
const maxCapWaiters = 4

// awaitFreedSlot takes a slot of d's endpoint for d into t, as
// acquireLease does, once an attempt of this node gives one back, trying
// for up to capWait; false when none came free in time (the slots are
// held by other nodes or by long requests), when enough deliveries already
// wait for the endpoint here, or when ctx (the job's) ends. It waits in
// turn with the endpoint's other waiters: a slot given back wakes one of
// them. It registers before each try, so that a slot given back between a
// try and the wait is not missed, and tries once more at the end, for a
// slot given back elsewhere (another node, an expired lease).
func (g *Gate) awaitFreedSlot(ctx context.Context, d *outboxtype.Delivery, req Request, t *Ticket) (bool, error) {
	lease := req.Hold + LeaseGrace
	take := func() (bool, error) {
		stmtCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statementTimeout)
		defer cancel()
		slot, err := g.queries.OutboxLeaseAcquire(stmtCtx, dbsqlc.OutboxLeaseAcquireParams{
			EndpointID: d.EndpointID, DeliveryID: d.ID, LeaseSeconds: lease.Seconds(),
		})
		switch {
		case err == nil:
			t.slot = slot
			return true, nil
		case errors.Is(err, pgx.ErrNoRows):
			return false, nil
		}
		return false, err
	}
	deadline := time.Now().Add(g.capWait)
	limit := min(int(d.MaxInFlight), maxCapWaiters)
	for ctx.Err() == nil {
		w := g.freed.join(d.EndpointID, limit)
		if w == nil {
			return false, nil
		}
		got, err := take()
		if got || err != nil {
			g.freed.leave(d.EndpointID, w)
			return got, err
		}
		woken := w.wait(ctx, time.Until(deadline))
		g.freed.leave(d.EndpointID, w)
		if !woken {
			if ctx.Err() != nil {
				return false, nil
			}
			return take()
		}
	}
	return false, nil
}

// slotWaiters wakes the deliveries of this node waiting at an endpoint's
// cap, one for each slot of it an attempt of this node gives back, in the
// order they began to wait.
type slotWaiters struct {
	mu         sync.Mutex
	byEndpoint map[uuid.UUID][]*slotWaiter
}

// slotWaiter is one delivery waiting at its endpoint's cap.
type slotWaiter struct{ woken chan struct{} } // holds a wake not yet taken

// wait waits for w's wake for at most d, or until ctx ends; true when
// woken.
func (w *slotWaiter) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return false
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-w.woken:
		return true
	case <-timer.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// join adds a waiter for endpointID, nil when limit already wait.
func (s *slotWaiters) join(endpointID uuid.UUID, limit int) *slotWaiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byEndpoint[endpointID]) >= limit {
		return nil
	}
	if s.byEndpoint == nil {
		s.byEndpoint = map[uuid.UUID][]*slotWaiter{}
	}
	w := &slotWaiter{woken: make(chan struct{}, 1)}
	s.byEndpoint[endpointID] = append(s.byEndpoint[endpointID], w)
	return w
}

// leave removes w; a wake w was given and did not take goes to the next
// waiter, so that no slot given back is left unclaimed.
func (s *slotWaiters) leave(endpointID uuid.UUID, w *slotWaiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.byEndpoint[endpointID]
	for i, o := range ws {
		if o == w {
			ws = append(ws[:i:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(s.byEndpoint, endpointID)
	} else {
		s.byEndpoint[endpointID] = ws
	}
	select {
	case <-w.woken:
		s.wakeLocked(endpointID)
	default:
	}
}

// given wakes the first delivery waiting for a slot of endpointID that
// has no wake yet.
func (s *slotWaiters) given(endpointID uuid.UUID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wakeLocked(endpointID)
}

func (s *slotWaiters) wakeLocked(endpointID uuid.UUID) {
	for _, w := range s.byEndpoint[endpointID] {
		select {
		case w.woken <- struct{}{}:
			return
		default: // woken already
		}
	}
}

// releaseSlot frees a slot outside an attempt's record (which frees it
// itself), such as when the worker is stopping.
func (g *Gate) releaseSlot(ctx context.Context, endpointID, deliveryID uuid.UUID, slot int32) {
	err := g.queries.OutboxLeaseRelease(ctx, dbsqlc.OutboxLeaseReleaseParams{EndpointID: endpointID, Slot: slot, DeliveryID: deliveryID})
	if err != nil {
		g.config.Logger.WarnContext(ctx, "outbox: release concurrency slot; it frees itself when it expires",
			"endpoint_id", endpointID, "delivery_id", deliveryID, "error", err)
		return
	}
	g.freed.given(endpointID)
}

// slotAsk is a delivery asking for a concurrency slot of its endpoint.
type slotAsk struct {
	endpointID, deliveryID uuid.UUID
	seconds                float64 // the lease's length
}

// takeSlots takes a free slot of each ask's endpoint's cap for its
// delivery, as OutboxLeaseAcquire does, in one statement per endpoint and
// lease length; NoSlot for an ask it found none free and unlocked for.
func (g *Gate) takeSlots(ctx context.Context, asks []slotAsk) ([]int32, []error) {
	slots := make([]int32, len(asks))
	for i := range slots {
		slots[i] = NoSlot
	}
	var errs []error
	// One statement per endpoint and lease length, in the order asked.
	type group struct {
		endpointID uuid.UUID
		seconds    float64
	}
	done := make(map[group]bool)
	for i, ask := range asks {
		gr := group{ask.endpointID, ask.seconds}
		if done[gr] {
			continue
		}
		done[gr] = true
		var members []int
		var ids []string
		asked := map[uuid.UUID]bool{}
		for j := i; j < len(asks); j++ {
			// A delivery asking twice at once (two runs of its job: a
			// rescue of a run still going) asks once here; its other
			// asks get no slot and take the single-delivery path.
			if asks[j].endpointID == gr.endpointID && asks[j].seconds == gr.seconds && !asked[asks[j].deliveryID] {
				asked[asks[j].deliveryID] = true
				members = append(members, j)
				ids = append(ids, asks[j].deliveryID.String())
			}
		}
		rows, err := g.queries.OutboxLeaseAcquireMany(ctx, dbsqlc.OutboxLeaseAcquireManyParams{
			EndpointID: gr.endpointID, DeliveryIds: ids, LeaseSeconds: gr.seconds,
		})
		if err != nil {
			if errs == nil {
				errs = make([]error, len(asks))
			}
			for _, j := range members {
				errs[j] = err
			}
			continue
		}
		got := make(map[uuid.UUID]int32, len(rows))
		for _, r := range rows {
			got[r.DeliveryID] = r.Slot
		}
		for _, j := range members {
			if slot, ok := got[asks[j].deliveryID]; ok {
				slots[j] = slot
			}
		}
	}
	return slots, errs
}

// Leases is an endpoint's cap and its leases, as CountLeases read them.
type Leases struct {
	// MaxInFlight is the endpoint's cap, 0 for none.
	MaxInFlight int32
	// Held counts the live leases; HeldAbove those in slots at or above
	// the cap (taken before it was lowered).
	Held, HeldAbove int64
}

// CountLeases returns the endpoint's cap and live leases (by the
// database's clock); pgx.ErrNoRows when the endpoint was deleted.
func (g *Gate) CountLeases(ctx context.Context, endpointID uuid.UUID) (Leases, error) {
	c, err := g.queries.OutboxLeaseCount(ctx, endpointID)
	return Leases{MaxInFlight: c.MaxInFlight, Held: c.Held, HeldAbove: c.HeldAbove}, err
}

// Extend extends the ticket's lease to hold (and LeaseGrace) from now, if
// it is still the ticket's, live and under the endpoint's cap; false when
// it is not.
func (t *Ticket) Extend(ctx context.Context, hold time.Duration) (bool, error) {
	n, err := t.gate.queries.OutboxLeaseExtend(ctx, dbsqlc.OutboxLeaseExtendParams{
		EndpointID: t.endpointID, Slot: t.slot, DeliveryID: t.deliveryID, LeaseSeconds: (hold + LeaseGrace).Seconds(),
	})
	return err == nil && n == 1, err
}
