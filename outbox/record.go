package outbox

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/shared"
)

// Reasons recorded when an attempt disables its endpoint.
const (
	reasonGone    = "endpoint answered 410 Gone"
	reasonFailing = "every attempt failed for longer than the disable-after period"
)

// attemptRecord is an attempt's outcome and the delivery state it leads to.
type attemptRecord struct {
	row           *outboxtype.Delivery
	slot          int32
	attemptedAt   time.Time
	out           *sendOutcome
	status        DeliveryStatus // the delivery's new status
	nextAttemptAt *time.Time
}

// recorded is what recording an attempt changed on its endpoint.
type recorded struct {
	// disabledReason is why the attempt disabled the endpoint; empty when
	// it did not.
	disabledReason string
	// circuitOpened is true when the attempt opened the endpoint's circuit,
	// for the circuitOpenings-th time since it was last closed.
	circuitOpened   bool
	circuitOpenings int
	// circuitClosed is true when the attempt, a success, closed it.
	circuitClosed bool
	// endpointVersion is the endpoint's version as the attempt was
	// recorded, before any change the attempt itself made.
	endpointVersion int64
}

// recordAttempt stores an attempt, the delivery's new state and the
// endpoint's health and circuit, and frees the attempt's lease, all in one
// statement (one round trip, atomic). It reports whether the attempt
// disabled the endpoint (it answered 410 Gone, or it has failed for
// Config.DisableAfter) and opened or closed its circuit. An error where
// errors.Is(err, pgx.ErrNoRows) is true means the delivery is no longer the
// attempt's to record: it no longer exists, a replay moved it to a newer
// generation, or it is finished.
//
// It locks the endpoint's row first, then the delivery's, then the
// lease's: the order EndpointDelete locks them in.
func (o *Outbox) recordAttempt(ctx context.Context, rec *attemptRecord) (*recorded, error) {
	if err := o.partitions.Ensure(ctx, nil, attemptsTable, rec.attemptedAt); err != nil {
		return nil, err
	}
	params, err := o.attemptParams(rec)
	if err != nil {
		return nil, err
	}
	// With the attempts of the node that finish at the same time, in one
	// transaction.
	res, err := o.combined.record.Do(ctx, params.EndpointID, params)
	if err != nil {
		return nil, err
	}
	out := &recorded{circuitOpened: res.CircuitOpened, circuitOpenings: int(res.CircuitOpenings), circuitClosed: res.CircuitClosed,
		endpointVersion: res.EndpointVersion}
	if res.DisabledNow {
		out.disabledReason = res.DisabledReason
	}
	return out, nil
}

// attemptParams are the parameters of OutboxAttemptRecord for rec.
func (o *Outbox) attemptParams(rec *attemptRecord) (*dbsqlc.OutboxAttemptRecordParams, error) {
	attemptID, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	var statusCode *int32
	if rec.out.StatusCode != 0 {
		code := int32(rec.out.StatusCode)
		statusCode = &code
	}
	now := o.config.now()
	var disableBefore *time.Time
	if o.config.DisableAfter > 0 {
		before := now.Add(-o.config.DisableAfter)
		disableBefore = &before
	}
	return &dbsqlc.OutboxAttemptRecordParams{
		Now:                now,
		AttemptID:          attemptID,
		AttemptedAt:        rec.attemptedAt,
		Succeeded:          rec.out.Succeeded(),
		StatusCode:         statusCode,
		ResponseBody:       append([]byte{}, rec.out.Body...), // never NULL
		ResponseTruncated:  rec.out.Truncated,
		Error:              shared.Text(rec.out.errorText(), 2048),
		DurationUs:         rec.out.Duration.Microseconds(),
		DeliveryID:         rec.row.ID,
		Generation:         rec.row.Generation,
		EndpointID:         rec.row.EndpointID,
		LeaseSlot:          rec.slot,
		Gone:               rec.out.Gone(),
		Verdict:            !rec.out.CutOff,
		DisableBefore:      disableBefore,
		GoneReason:         reasonGone,
		FailingReason:      reasonFailing,
		CircuitThreshold:   int32(max(o.config.CircuitBreakerThreshold, 0)),
		CooldownSeconds:    o.config.CircuitBreakerCooldown.Seconds(),
		MaxCooldownSeconds: o.config.CircuitBreakerMaxCooldown.Seconds(),
		StaleBefore:        now.Add(-time.Second),
		DeliveryStatus:     string(rec.status),
		NextAttemptAt:      rec.nextAttemptAt,
	}, nil
}
