package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/audit"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/delivery"
	"github.com/wharfhq/wharf/internal/pgxtx"
	"github.com/wharfhq/wharf/internal/shared"
)

// RedriveParams select the finished deliveries Redrive sends again, across
// endpoints: "every dead delivery answered 5xx to tenant acme's endpoints,
// of invoice.* events published since 14:00". The zero value selects
// every dead delivery of an enabled endpoint.
type RedriveParams struct {
	// Tenant keeps the deliveries to that tenant's endpoints when not nil.
	Tenant *string
	// EndpointID keeps one endpoint's deliveries when not nil.
	EndpointID *uuid.UUID
	// EventType keeps the events of a type: exact, "prefix.*" or "*".
	// Defaults to "*".
	EventType string
	// Status is the deliveries' status: StatusDead (the default) or
	// StatusSucceeded (to send delivered events again).
	Status DeliveryStatus
	// MinStatusCode and MaxStatusCode keep the deliveries whose last
	// answer's status code lies between them (500 and 599: every 5xx);
	// MinStatusCode 0, the default, keeps any, answered or not.
	MinStatusCode, MaxStatusCode int
	// Since and Until keep the deliveries of events published at or after
	// Since and before Until. Default: all, and until now.
	Since, Until time.Time
	// DryRun counts the deliveries without changing any. Defaults to false.
	DryRun bool
	// BatchSize is how many deliveries one transaction sends again, each
	// batch recorded in the audit log. Defaults to 500, at most 10,000.
	BatchSize int
}

// ErrInvalidRedrive is wrapped by Redrive's error for parameters it
// cannot use; nothing was read or changed.
var ErrInvalidRedrive = errors.New("outbox: invalid redrive")

// RedriveResult says what Redrive did, so far while it runs.
type RedriveResult struct {
	// Matched counts the deliveries the parameters selected.
	Matched int
	// Replayed counts those sent again (on a dry run, none).
	Replayed int
	// Skipped counts those a replay, an erasure, an endpoint's disabling
	// or retention changed between selecting and replaying them.
	Skipped int
	// Batches counts the transactions committed.
	Batches int
}

const (
	defaultRedriveBatch = 500
	maxRedriveBatch     = 10000
)

// Redrive sends again, in new generations with the same webhook-ids, the
// finished deliveries params selects (see RedriveParams), a batch per
// transaction in delivery order, and returns what it did. progress, when
// not nil, is called after each batch with the totals so far. Each batch
// writes an audit entry ("delivery.redrive", the parameters and its count).
// An error stops it: the batches before it stay committed, and the result
// says how far it got. A dry run counts the deliveries it would send, in
// the same batches, changing nothing. With EndpointID, an error where
// errors.Is is true for ErrNotFound (no such endpoint, or not Tenant's) or
// ErrEndpointDisabled (enable it first) comes before any batch; otherwise
// disabled endpoints' deliveries are not selected.
func (o *Outbox) Redrive(ctx context.Context, params *RedriveParams, progress func(RedriveResult)) (*RedriveResult, error) {
	p, err := checkRedrive(params, o.config.now())
	if err != nil {
		return nil, err
	}
	if p.EndpointID != nil {
		ep, err := o.queries.OutboxEndpointGet(ctx, *p.EndpointID)
		switch {
		case err != nil:
			return nil, fmt.Errorf("outbox: redrive endpoint %s: %w", *p.EndpointID, translateError(err))
		case p.Tenant != nil && ep.Tenant != *p.Tenant:
			return nil, fmt.Errorf("outbox: redrive endpoint %s: %w", *p.EndpointID, ErrNotFound)
		case !ep.Enabled:
			return nil, fmt.Errorf("outbox: redrive endpoint %s: %w", *p.EndpointID, ErrEndpointDisabled)
		}
	}
	res := &RedriveResult{}
	var after int64 = math.MinInt64
	for {
		var batch int
		err := o.inTx(ctx, func(tx pgx.Tx) error {
			var err error
			batch, after, err = o.redriveBatch(ctx, tx, &p, after, res)
			return err
		})
		if err != nil {
			return res, fmt.Errorf("outbox: redrive: %w", err)
		}
		if batch == 0 {
			return res, nil
		}
		res.Batches++
		if progress != nil {
			progress(*res)
		}
		if batch < p.BatchSize {
			return res, nil
		}
	}
}

// checkRedrive checks params and fills in its defaults (now is Until's).
func checkRedrive(params *RedriveParams, now time.Time) (RedriveParams, error) {
	var p RedriveParams
	if params != nil {
		p = *params
	}
	p.Status = cmp.Or(p.Status, StatusDead)
	if p.Status != StatusDead && p.Status != StatusSucceeded {
		return p, fmt.Errorf("%w: status %q is neither dead nor succeeded", ErrInvalidRedrive, p.Status)
	}
	p.EventType = cmp.Or(p.EventType, "*")
	if !shared.ValidTypePattern(p.EventType) {
		return p, fmt.Errorf(`%w: event type %q is not a type, "prefix.*" or "*"`, ErrInvalidRedrive, p.EventType)
	}
	switch {
	case p.MinStatusCode == 0 && p.MaxStatusCode == 0:
	case p.MinStatusCode < 100 || p.MaxStatusCode > 599 || p.MinStatusCode > p.MaxStatusCode:
		return p, fmt.Errorf("%w: status codes %d–%d are not a range within 100–599", ErrInvalidRedrive, p.MinStatusCode, p.MaxStatusCode)
	}
	if p.Until.IsZero() {
		p.Until = now
	}
	if !p.Since.Before(p.Until) {
		return p, fmt.Errorf("%w: since %s is not before until %s", ErrInvalidRedrive, p.Since.Format(time.RFC3339), p.Until.Format(time.RFC3339))
	}
	if p.BatchSize < 0 || p.BatchSize > maxRedriveBatch {
		return p, fmt.Errorf("%w: batch size %d is outside 1–%d", ErrInvalidRedrive, p.BatchSize, maxRedriveBatch)
	}
	p.BatchSize = cmp.Or(p.BatchSize, defaultRedriveBatch)
	return p, nil
}

// redriveBatch selects the batch of deliveries after after and, unless a
// dry run, sends them again in tx, adding to res; it returns how many it
// selected and the last one's seq.
func (o *Outbox) redriveBatch(ctx context.Context, tx pgx.Tx, p *RedriveParams, after int64, res *RedriveResult) (int, int64, error) {
	q := o.queries.WithTx(tx)
	found, err := q.OutboxDeliveriesRedriveFind(ctx, dbsqlc.OutboxDeliveriesRedriveFindParams{
		Status: string(p.Status), Tenant: p.Tenant, EndpointID: p.EndpointID,
		MinCode: int32(p.MinStatusCode), MaxCode: int32(p.MaxStatusCode),
		Since: p.Since, Until: p.Until, AfterSeq: after, EventType: p.EventType, BatchSize: int32(p.BatchSize),
	})
	if err != nil || len(found) == 0 {
		return 0, after, err
	}
	res.Matched += len(found)
	last := found[len(found)-1].Seq
	if p.DryRun {
		return len(found), last, nil
	}
	if err := holdRetentionLock(ctx, q); err != nil {
		return 0, after, err
	}
	ids := make([]uuid.UUID, len(found))
	endpoints := make([]uuid.UUID, len(found))
	for i, f := range found {
		ids[i], endpoints[i] = f.ID, f.EndpointID
	}
	// The lock order of every statement locking several deliveries: their
	// endpoints first.
	slices.SortFunc(endpoints, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	if err := q.OutboxEndpointsLockKeyShare(ctx, pgxtx.UUIDTexts(slices.Compact(endpoints))); err != nil {
		return 0, after, err
	}
	rows, err := q.OutboxDeliveriesRequeueMany(ctx, dbsqlc.OutboxDeliveriesRequeueManyParams{
		Now: o.config.now(), Ids: pgxtx.UUIDTexts(ids), Status: string(p.Status),
	})
	if err != nil {
		return 0, after, err
	}
	jobs := make([]delivery.Pending, len(rows))
	for i, row := range rows {
		jobs[i] = delivery.Pending{
			ID: row.ID, EndpointID: row.EndpointID, Generation: row.Generation, OrderingKey: row.OrderingKey, Attempts: row.Attempts,
			Endpoint: delivery.Shape{MaxInFlight: row.MaxInFlight, RateLimited: row.RateLimitPerSecond > 0},
		}
	}
	if err := o.engine.InsertJobs(ctx, tx, jobs, 0); err != nil {
		return 0, after, err
	}
	res.Replayed += len(rows)
	res.Skipped += len(found) - len(rows)
	tenant := ""
	if p.Tenant != nil {
		tenant = *p.Tenant
	}
	return len(found), last, audit.Write(ctx, tx, o.config.now(), audit.Record{
		Tenant: tenant, Action: "delivery.redrive", ObjectType: "redrive", ObjectID: "",
		Details: redriveDetails(p, len(rows)),
	})
}

// redriveDetails are a redrive batch's audit details: its parameters and
// what it sent.
func redriveDetails(p *RedriveParams, replayed int) map[string]any {
	d := map[string]any{"status": p.Status, "event_type": p.EventType, "since": p.Since, "until": p.Until, "deliveries": replayed}
	if p.EndpointID != nil {
		d["endpoint_id"] = p.EndpointID.String()
	}
	if p.MinStatusCode != 0 {
		d["status_codes"] = fmt.Sprintf("%d-%d", p.MinStatusCode, p.MaxStatusCode)
	}
	return d
}
