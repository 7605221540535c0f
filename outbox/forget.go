package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/audit"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/pgxtx"
)

// Erasure says what ForgetEvent or ForgetTenant erased.
type Erasure struct {
	// Events is how many events' payloads were erased.
	Events int
	// Stopped is how many of their deliveries, still to send, were
	// deleted: no attempt sends what was erased.
	Stopped int
	// Attempts is how many of their attempts' response bodies (which an
	// endpoint may echo the payload in) or errors were erased.
	Attempts int
}

// ErrTenantRequired is returned by ForgetTenant for an empty tenant, which
// would name every event published without one.
var ErrTenantRequired = errors.New("outbox: ForgetTenant needs a tenant")

// ForgetEvent erases event eventID ("evt_…") on an erasure request, in one
// transaction: its payload, its attempts' response bodies and errors, and
// the reasons and details of the audit entries about its deliveries are
// emptied, and its deliveries still to send (pending or retrying) are
// deleted, their jobs finding nothing to send. Its succeeded and dead
// deliveries stay, without a payload to replay (ErrEventGone). An attempt
// under way as it commits may still send what it loaded; it is not
// recorded. Returns an error where errors.Is(err, ErrNotFound) is true
// when no event has the id.
func (o *Outbox) ForgetEvent(ctx context.Context, eventID string) (*Erasure, error) {
	return inTx(ctx, o, func(tx pgx.Tx) (*Erasure, error) { return o.ForgetEventTx(ctx, tx, eventID) })
}

// ForgetEventTx is ForgetEvent in tx: the erasure holds once tx commits.
func (o *Outbox) ForgetEventTx(ctx context.Context, tx pgx.Tx, eventID string) (*Erasure, error) {
	id, err := ParseEventID(eventID)
	if err != nil {
		return nil, err
	}
	q := dbsqlc.New(tx)
	events, err := q.OutboxEventsForget(ctx, dbsqlc.OutboxEventsForgetParams{Now: o.config.now(), Ids: pgxtx.UUIDTexts([]uuid.UUID{id})})
	if err != nil {
		return nil, fmt.Errorf("outbox: forget event: %w", err)
	}
	if len(events) == 0 {
		return nil, fmt.Errorf("%w: no event %s", ErrNotFound, eventID)
	}
	e, err := o.forget(ctx, q, events)
	if err != nil {
		return nil, err
	}
	return e, audit.Write(ctx, tx, o.config.now(), audit.Record{
		Action: "event.forget", ObjectType: "event", ObjectID: eventID,
		Details: map[string]any{"stopped": e.Stopped, "attempts": e.Attempts},
	})
}

// ForgetTenant erases every event of tenant, as ForgetEvent erases one, in
// one transaction, and empties the reasons and details of the tenant's
// audit entries. The tenant's endpoints stay (EndpointDelete removes
// them). An empty tenant is refused with ErrTenantRequired.
func (o *Outbox) ForgetTenant(ctx context.Context, tenant string) (*Erasure, error) {
	return inTx(ctx, o, func(tx pgx.Tx) (*Erasure, error) { return o.ForgetTenantTx(ctx, tx, tenant) })
}

// ForgetTenantTx is ForgetTenant in tx: the erasure holds once tx commits.
func (o *Outbox) ForgetTenantTx(ctx context.Context, tx pgx.Tx, tenant string) (*Erasure, error) {
	if tenant == "" {
		return nil, ErrTenantRequired
	}
	q := dbsqlc.New(tx)
	events, err := q.OutboxTenantEventsForget(ctx, dbsqlc.OutboxTenantEventsForgetParams{Now: o.config.now(), Tenant: tenant})
	if err != nil {
		return nil, fmt.Errorf("outbox: forget tenant: %w", err)
	}
	e, err := o.forget(ctx, q, events)
	if err != nil {
		return nil, err
	}
	if _, err := q.AuditForgetTenant(ctx, tenant); err != nil {
		return nil, fmt.Errorf("outbox: forget tenant: audit: %w", err)
	}
	return e, audit.Write(ctx, tx, o.config.now(), audit.Record{
		Tenant: tenant, Action: "tenant.forget", ObjectType: "tenant",
		Details: map[string]any{"events": e.Events, "stopped": e.Stopped, "attempts": e.Attempts},
	})
}

// forget erases what events, whose payloads q's transaction erased,
// left elsewhere: their attempts' responses and errors, their deliveries
// still to send, the audit entries about their deliveries.
func (o *Outbox) forget(ctx context.Context, q *dbsqlc.Queries, events []uuid.UUID) (*Erasure, error) {
	e := &Erasure{Events: len(events)}
	if len(events) == 0 {
		return e, nil
	}
	deliveries, err := q.OutboxDeliveriesOfEvents(ctx, pgxtx.UUIDTexts(events))
	if err != nil {
		return nil, fmt.Errorf("outbox: forget: deliveries: %w", err)
	}
	var all, unfinished, endpoints []uuid.UUID
	for _, d := range deliveries {
		all = append(all, d.ID)
		if d.Status == outboxtype.StatusPending || d.Status == outboxtype.StatusRetrying {
			unfinished = append(unfinished, d.ID)
			endpoints = append(endpoints, d.EndpointID)
		}
	}
	n, err := q.OutboxAttemptsForget(ctx, pgxtx.UUIDTexts(all))
	if err != nil {
		return nil, fmt.Errorf("outbox: forget: attempts: %w", err)
	}
	e.Attempts = int(n)
	if len(unfinished) > 0 {
		// The lock order of every statement locking several deliveries:
		// their endpoints first.
		slices.SortFunc(endpoints, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
		if err := q.OutboxEndpointsLockKeyShare(ctx, pgxtx.UUIDTexts(slices.Compact(endpoints))); err != nil {
			return nil, fmt.Errorf("outbox: forget: lock endpoints: %w", err)
		}
		stopped, err := q.OutboxDeliveriesForgetUnfinished(ctx, pgxtx.UUIDTexts(unfinished))
		if err != nil {
			return nil, fmt.Errorf("outbox: forget: stop deliveries: %w", err)
		}
		e.Stopped = len(stopped)
	}
	if _, err := q.AuditForgetObjects(ctx, dbsqlc.AuditForgetObjectsParams{ObjectType: "delivery", ObjectIds: pgxtx.UUIDTexts(all)}); err != nil {
		return nil, fmt.Errorf("outbox: forget: audit: %w", err)
	}
	return e, nil
}
