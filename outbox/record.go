package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// attemptRecord is an attempt's outcome and the delivery state it leads to.
type attemptRecord struct {
	row           *dbsqlc.OutboxDeliveryGetForWorkRow
	slot          int32
	attemptedAt   time.Time
	out           *sendOutcome
	status        string // the delivery's new status
	nextAttemptAt *time.Time
}

// recordAttempt stores an attempt, the delivery's new state and the
// endpoint's health in one transaction, and frees the attempt's lease. It
// returns the reason when it disabled the endpoint.
func (o *Outbox) recordAttempt(ctx context.Context, rec *attemptRecord) (string, error) {
	if err := o.partitions.Ensure(ctx, attemptsTable, rec.attemptedAt); err != nil {
		return "", err
	}
	attemptID, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	attemptStatus := attemptFailed
	if rec.out.succeeded() {
		attemptStatus = attemptSucceeded
	}
	var statusCode *int32
	if rec.out.statusCode != 0 {
		code := int32(rec.out.statusCode)
		statusCode = &code
	}
	now := o.config.now()
	var disabledReason string
	err = o.inTx(ctx, func(tx pgx.Tx) error {
		q := o.queries.WithTx(tx)
		_, err := q.OutboxAttemptRecord(ctx, dbsqlc.OutboxAttemptRecordParams{
			DeliveryStatus:    rec.status,
			StatusCode:        statusCode,
			Error:             truncate(rec.out.errorText(), 2048),
			NextAttemptAt:     rec.nextAttemptAt,
			Now:               now,
			DeliveryID:        rec.row.ID,
			AttemptID:         attemptID,
			AttemptedAt:       rec.attemptedAt,
			AttemptStatus:     attemptStatus,
			ResponseBody:      append([]byte{}, rec.out.body...), // never NULL
			ResponseTruncated: rec.out.truncated,
			DurationUs:        rec.out.duration.Microseconds(),
			EndpointID:        rec.row.EndpointID,
			LeaseSlot:         rec.slot,
		})
		if err != nil {
			return fmt.Errorf("record attempt: %w", err)
		}
		disabledReason, err = o.recordHealth(ctx, q, rec.row.EndpointID, rec.out, now)
		return err
	})
	return disabledReason, err
}

// recordHealth updates the endpoint's health after an attempt and disables
// it when it answered 410 Gone or has failed for Config.DisableAfter. It
// returns the reason when it disabled the endpoint.
func (o *Outbox) recordHealth(ctx context.Context, q *dbsqlc.Queries, endpointID uuid.UUID, out *sendOutcome, now time.Time) (string, error) {
	if out.succeeded() {
		return "", q.OutboxEndpointRecordSuccess(ctx, dbsqlc.OutboxEndpointRecordSuccessParams{
			ID: endpointID, Now: now, StaleBefore: now.Add(-time.Second),
		})
	}
	health, err := q.OutboxEndpointRecordFailure(ctx, dbsqlc.OutboxEndpointRecordFailureParams{ID: endpointID, Now: now})
	if err != nil {
		return "", err
	}
	if !health.Enabled {
		return "", nil
	}
	var reason string
	switch {
	case out.gone():
		reason = "endpoint answered 410 Gone"
	case o.config.DisableAfter > 0 && health.FailingSince != nil && now.Sub(*health.FailingSince) >= o.config.DisableAfter:
		reason = fmt.Sprintf("every attempt failed since %s", health.FailingSince.Format(time.RFC3339))
	default:
		return "", nil
	}
	_, err = q.OutboxEndpointDisable(ctx, dbsqlc.OutboxEndpointDisableParams{ID: endpointID, Reason: reason, Now: now})
	return reason, err
}
