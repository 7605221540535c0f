package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/audit"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/delivery"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/partition"
	"github.com/wharfhq/wharf/internal/pgxtx"
	"github.com/wharfhq/wharf/internal/shared"
)

// DeliveryStatus is where a delivery stands.
type DeliveryStatus string

// Delivery statuses.
const (
	// StatusPending: waiting for its first attempt, or being attempted.
	StatusPending DeliveryStatus = outboxtype.StatusPending
	// StatusRetrying: an attempt failed and another is scheduled.
	StatusRetrying DeliveryStatus = outboxtype.StatusRetrying
	// StatusSucceeded: an attempt was answered 2xx.
	StatusSucceeded DeliveryStatus = outboxtype.StatusSucceeded
	// StatusDead: attempts are exhausted, the endpoint answered 410 or was
	// disabled, or the event is gone. Dead deliveries can be replayed.
	StatusDead DeliveryStatus = outboxtype.StatusDead
)

// attemptSucceeded is a succeeded attempt's stored status.
const attemptSucceeded = "succeeded"

// Delivery is one event's delivery to one endpoint.
type Delivery struct {
	// ID identifies the delivery.
	ID uuid.UUID
	// EventID is the event's id (the webhook-id).
	EventID string
	// EndpointID is the endpoint's id.
	EndpointID uuid.UUID
	// EventType is the event's type; empty once retention dropped the
	// event.
	EventType string
	// Tenant is the endpoint's tenant.
	Tenant string
	// Status is StatusPending, StatusRetrying, StatusSucceeded or StatusDead.
	Status DeliveryStatus
	// Attempts counts the recorded attempts, replays included.
	Attempts int
	// LastStatusCode is the last attempt's HTTP status, nil without a
	// response.
	LastStatusCode *int
	// LastError describes the last failure.
	LastError string
	// NextAttemptAt is when the next attempt is due, nil when none is.
	NextAttemptAt *time.Time
	// CreatedAt is when the delivery was created: when the event was
	// published, or when EndpointRecover created it later.
	CreatedAt time.Time
	// EventCreatedAt is when the event was published.
	EventCreatedAt time.Time
	// UpdatedAt is when the delivery last changed.
	UpdatedAt time.Time
	// SucceededAt is when an attempt succeeded.
	SucceededAt *time.Time
	// Seq is the delivery's place in publish order (DeliveryCursor's key).
	Seq int64
}

// Attempt is one recorded delivery attempt.
type Attempt struct {
	// ID identifies the attempt.
	ID uuid.UUID
	// DeliveryID is the delivery attempted.
	DeliveryID uuid.UUID
	// Number counts the delivery's attempts from 1.
	Number int
	// AttemptedAt is when the attempt started.
	AttemptedAt time.Time
	// Succeeded is true when the endpoint answered 2xx.
	Succeeded bool
	// StatusCode is the HTTP status, nil without a response.
	StatusCode *int
	// ResponseBody is the start of the response body (Config.ResponseBodyLimit).
	ResponseBody []byte
	// ResponseTruncated is true when the body was longer.
	ResponseTruncated bool
	// Error describes a failure.
	Error string
	// Duration is how long the request took.
	Duration time.Duration
}

// DeliveryListParams filters DeliveryList. A nil *DeliveryListParams lists
// the newest 100 deliveries.
type DeliveryListParams struct {
	// EndpointID lists one endpoint's deliveries when not nil.
	EndpointID *uuid.UUID
	// Tenant lists only the deliveries to that tenant's endpoints when not
	// nil.
	Tenant *string
	// EventID lists one event's deliveries when not empty.
	EventID string
	// Status lists deliveries in that status when not empty.
	Status DeliveryStatus
	// EventType lists deliveries of events of this type when not empty.
	EventType string
	// Since lists deliveries of events published at or after it when not
	// zero. Defaults to all.
	Since time.Time
	// Limit is the most deliveries of one page. Defaults to 100, at most
	// 10000.
	Limit int
	// After is the cursor of the last delivery of the previous page
	// (DeliveryCursor of it). Defaults to the first page.
	After string
}

// ErrInvalidCursor is returned by DeliveryList and EndpointList for a
// cursor that DeliveryCursor or EndpointCursor did not return.
var ErrInvalidCursor = errors.New("outbox: invalid list cursor")

// DeliveryCursor returns the list cursor of d: give it as
// DeliveryListParams.After to list the deliveries after d.
func DeliveryCursor(d *Delivery) string { return shared.EncodeSeqCursor(d.Seq) }

// DeliveryGet returns a delivery, or an error where errors.Is(err,
// ErrNotFound) is true.
func (o *Outbox) DeliveryGet(ctx context.Context, id uuid.UUID) (*Delivery, error) {
	return deliveryGet(ctx, o.pool, id)
}

// DeliveryGetTx is DeliveryGet in tx.
func (o *Outbox) DeliveryGetTx(ctx context.Context, tx pgx.Tx, id uuid.UUID) (*Delivery, error) {
	return deliveryGet(ctx, tx, id)
}

func deliveryGet(ctx context.Context, db dbsqlc.DBTX, id uuid.UUID) (*Delivery, error) {
	row, err := dbsqlc.New(db).OutboxDeliveryGet(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("outbox: delivery %s: %w", id, translateError(err))
	}
	return deliveryFromRow(&row.WharfOutboxDelivery, row.EventType, row.Tenant), nil
}

// DeliveryList returns a page of deliveries, newest first (publish order);
// page on with DeliveryListParams.After set to DeliveryCursor of the last.
func (o *Outbox) DeliveryList(ctx context.Context, params *DeliveryListParams) ([]*Delivery, error) {
	if params == nil {
		params = &DeliveryListParams{}
	}
	limit, err := listLimit(params.Limit)
	if err != nil {
		return nil, err
	}
	query := dbsqlc.OutboxDeliveryListParams{EndpointID: params.EndpointID, Tenant: params.Tenant, MaxRows: limit}
	if params.After != "" {
		seq, err := shared.DecodeSeqCursor(params.After)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidCursor, err)
		}
		query.AfterSeq = &seq
	}
	if params.EventID != "" {
		id, err := ParseEventID(params.EventID)
		if err != nil {
			return nil, err
		}
		query.EventID = &id
	}
	if params.Status != "" {
		if err := checkText("status", string(params.Status)); err != nil {
			return nil, fmt.Errorf("outbox: list deliveries: %w", err)
		}
		status := string(params.Status)
		query.Status = &status
	}
	if params.EventType != "" {
		if err := checkText("event type", params.EventType); err != nil {
			return nil, fmt.Errorf("outbox: list deliveries: %w", err)
		}
		query.EventType = &params.EventType
	}
	if !params.Since.IsZero() {
		query.Since = &params.Since
	}
	rows, err := o.queries.OutboxDeliveryList(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("outbox: list deliveries: %w", err)
	}
	out := make([]*Delivery, len(rows))
	for i := range rows {
		out[i] = deliveryFromRow(&rows[i].WharfOutboxDelivery, rows[i].EventType, rows[i].Tenant)
	}
	return out, nil
}

// AttemptList returns a delivery's recorded attempts, oldest first (those
// retention has not dropped).
func (o *Outbox) AttemptList(ctx context.Context, deliveryID uuid.UUID) ([]*Attempt, error) {
	return attemptList(ctx, o.pool, deliveryID)
}

// AttemptListTx is AttemptList in tx.
func (o *Outbox) AttemptListTx(ctx context.Context, tx pgx.Tx, deliveryID uuid.UUID) ([]*Attempt, error) {
	return attemptList(ctx, tx, deliveryID)
}

func attemptList(ctx context.Context, db dbsqlc.DBTX, deliveryID uuid.UUID) ([]*Attempt, error) {
	rows, err := dbsqlc.New(db).OutboxAttemptList(ctx, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("outbox: list attempts: %w", err)
	}
	out := make([]*Attempt, len(rows))
	for i, row := range rows {
		out[i] = &Attempt{
			ID:                row.ID,
			DeliveryID:        row.DeliveryID,
			Number:            int(row.Attempt),
			AttemptedAt:       row.AttemptedAt,
			Succeeded:         row.Status == attemptSucceeded,
			StatusCode:        intPtr(row.StatusCode),
			ResponseBody:      row.ResponseBody,
			ResponseTruncated: row.ResponseTruncated,
			Error:             row.Error,
			Duration:          time.Duration(row.DurationUs) * time.Microsecond,
		}
	}
	return out, nil
}

// DeliveryReplay sends a delivery again, at once, with a fresh retry
// schedule and the same webhook-id. A finished (succeeded or dead) delivery
// can always be replayed. An unfinished (pending or retrying) one can be
// replayed only when no River job will attempt it any more — its job was
// cancelled, discarded or deleted, say by hand in River — which recovers it
// at once, before Rescue would.
//
// It returns an error where errors.Is is true for ErrNotFound (no such
// delivery), ErrDeliveryInProgress (pending or retrying, and a River job
// of it is still waiting or running), ErrEndpointDisabled (enable the
// endpoint first) or ErrEventGone (retention dropped or scrubbed its
// event: there is nothing left to send).
func (o *Outbox) DeliveryReplay(ctx context.Context, id uuid.UUID) error {
	return o.inTx(ctx, func(tx pgx.Tx) error { return o.DeliveryReplayTx(ctx, tx, id) })
}

// DeliveryReplayTx is DeliveryReplay in tx. After an error tx may be
// aborted: roll it back.
func (o *Outbox) DeliveryReplayTx(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	q := o.queries.WithTx(tx)
	if err := holdRetentionLock(ctx, q); err != nil {
		return err
	}
	requeue := dbsqlc.OutboxDeliveryRequeueParams{ID: id, Now: o.config.now()}
	generation, err := q.OutboxDeliveryRequeue(ctx, requeue)
	if errors.Is(err, pgx.ErrNoRows) {
		// Not finished (or not replayable at all): an unfinished delivery
		// whose job is gone may be replayed all the same.
		got, err := q.OutboxDeliveryGet(ctx, id)
		if err != nil {
			return fmt.Errorf("outbox: replay delivery %s: %w", id, translateError(err))
		}
		row := &got.WharfOutboxDelivery
		if status := DeliveryStatus(row.Status); status != StatusPending && status != StatusRetrying {
			return whyNotReplayable(ctx, q, id)
		}
		job, err := o.engine.LiveJob(ctx, tx, id, row.Generation)
		if err != nil {
			return fmt.Errorf("outbox: replay delivery %s: %w", id, err)
		}
		if job != nil {
			return fmt.Errorf("outbox: replay delivery %s: %w (%s; River job %d is %s)",
				id, ErrDeliveryInProgress, row.Status, job.ID, job.State)
		}
		requeue.OrphanedGeneration = &row.Generation
		generation, err = q.OutboxDeliveryRequeue(ctx, requeue)
		if errors.Is(err, pgx.ErrNoRows) {
			return whyNotReplayable(ctx, q, id)
		}
		if err != nil {
			return fmt.Errorf("outbox: replay delivery %s: %w", id, err)
		}
		o.config.Logger.InfoContext(ctx, "outbox: replaying an unfinished delivery whose job is gone",
			"delivery_id", id, "status", row.Status, "generation", generation)
	} else if err != nil {
		return fmt.Errorf("outbox: replay delivery %s: %w", id, err)
	}
	if err := o.engine.InsertJobs(ctx, tx, []delivery.Pending{{ID: id, Generation: generation}}, 0); err != nil {
		return err
	}
	got, err := q.OutboxDeliveryGet(ctx, id)
	if err != nil {
		return fmt.Errorf("outbox: replay delivery %s: %w", id, err)
	}
	return audit.Write(ctx, tx, o.config.now(), audit.Record{
		Tenant: got.Tenant, Action: "delivery.replay", ObjectType: "delivery", ObjectID: id.String(),
		Details: map[string]any{"event_id": outboxtype.FormatEventID(got.WharfOutboxDelivery.EventID)},
	})
}

// whyNotReplayable returns the error of a replay of a delivery that could
// not be requeued.
func whyNotReplayable(ctx context.Context, q *dbsqlc.Queries, id uuid.UUID) error {
	rows, err := q.OutboxDeliveryGetForWork(ctx, pgxtx.UUIDTexts([]uuid.UUID{id}))
	if err == nil && len(rows) == 0 {
		err = pgx.ErrNoRows
	}
	if err != nil {
		return fmt.Errorf("outbox: replay delivery %s: %w", id, translateError(err))
	}
	row := rows[0]
	switch {
	case !row.Enabled:
		return fmt.Errorf("outbox: replay delivery %s: %w", id, ErrEndpointDisabled)
	case row.Payload == nil:
		return fmt.Errorf("outbox: replay delivery %s: %w", id, ErrEventGone)
	}
	// Replayed or attempted by someone else meanwhile.
	return fmt.Errorf("outbox: replay delivery %s: %w (%s)", id, ErrDeliveryInProgress, row.Status)
}

// DeliveryReplayDead sends again every dead delivery of an endpoint whose
// event was published at or after since, and returns how many. It returns an
// error where errors.Is is true for ErrNotFound or ErrEndpointDisabled
// (enable the endpoint first).
func (o *Outbox) DeliveryReplayDead(ctx context.Context, endpointID uuid.UUID, since time.Time) (int, error) {
	var n int
	err := o.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		n, err = o.DeliveryReplayDeadTx(ctx, tx, endpointID, since)
		return err
	})
	return n, err
}

// DeliveryReplayDeadTx is DeliveryReplayDead in tx. After an error tx may be
// aborted: roll it back.
func (o *Outbox) DeliveryReplayDeadTx(ctx context.Context, tx pgx.Tx, endpointID uuid.UUID, since time.Time) (int, error) {
	q := o.queries.WithTx(tx)
	if err := holdRetentionLock(ctx, q); err != nil {
		return 0, err
	}
	endpoint, err := q.OutboxEndpointGet(ctx, endpointID)
	if err != nil {
		return 0, fmt.Errorf("outbox: replay dead deliveries of endpoint %s: %w", endpointID, translateError(err))
	}
	if !endpoint.Enabled {
		return 0, fmt.Errorf("outbox: replay dead deliveries of endpoint %s: %w", endpointID, ErrEndpointDisabled)
	}
	rows, err := q.OutboxDeliveryRequeueDead(ctx, dbsqlc.OutboxDeliveryRequeueDeadParams{
		EndpointID: endpointID, Since: since, Now: o.config.now(),
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: replay dead deliveries of endpoint %s: %w", endpointID, err)
	}
	jobs := make([]delivery.Pending, len(rows))
	for i, row := range rows {
		jobs[i] = delivery.Pending{
			ID: row.ID, EndpointID: endpointID, Generation: row.Generation, OrderingKey: row.OrderingKey, Attempts: row.Attempts,
			Endpoint: shapeOf(&endpoint),
		}
	}
	if err := o.engine.InsertJobs(ctx, tx, jobs, 0); err != nil {
		return 0, err
	}
	err = audit.Write(ctx, tx, o.config.now(), audit.Record{
		Tenant: endpoint.Tenant, Action: "endpoint.replay_dead", ObjectType: "endpoint", ObjectID: endpointID.String(),
		Details: map[string]any{"since": since, "deliveries": len(rows)},
	})
	return len(rows), err
}

func deliveryFromRow(row *dbsqlc.WharfOutboxDelivery, eventType, tenant string) *Delivery {
	return &Delivery{
		Seq:            row.Seq,
		ID:             row.ID,
		EventID:        outboxtype.FormatEventID(row.EventID),
		EndpointID:     row.EndpointID,
		EventType:      eventType,
		Tenant:         tenant,
		Status:         DeliveryStatus(row.Status),
		Attempts:       int(row.Attempts),
		LastStatusCode: intPtr(row.LastStatusCode),
		LastError:      row.LastError,
		NextAttemptAt:  row.NextAttemptAt,
		CreatedAt:      row.CreatedAt,
		EventCreatedAt: row.EventCreatedAt,
		UpdatedAt:      row.UpdatedAt,
		SucceededAt:    row.SucceededAt,
	}
}

func intPtr(v *int32) *int {
	if v == nil {
		return nil
	}
	n := int(*v)
	return &n
}

// holdRetentionLock keeps retention from dropping event partitions until
// the transaction ends: a replay revives deliveries of old events, which
// retention must see as unfinished or not at all.
func holdRetentionLock(ctx context.Context, q *dbsqlc.Queries) error {
	return q.AdvisoryXactLockShared(ctx, dbsqlc.AdvisoryXactLockSharedParams{
		Class: partition.LockClass(),
		Key:   partition.RetentionLockKey(eventsTable),
	})
}
