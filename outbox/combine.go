package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/groupcommit"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/pgxtx"
)

// The delivery worker's statements that load the delivery and record the
// attempt (and admission's first take of a slot) are combined across the deliveries
// a node works at once: each runs as one statement (or one pipelined
// transaction) for every delivery that asks while the previous ones are in
// the database. Under load this takes the database's work per delivery, and
// the connections the workers hold, down by the size of the batches; a lone
// delivery runs its statement at once, as before.
const (
	// combineMax bounds the deliveries of one combined statement.
	combineMax = 64
	// combineSlots is how many combined statements of a kind run at once.
	combineSlots = 2
)

// combiners are an Outbox's combined statements.
type combiners struct {
	load *groupcommit.Batcher[uuid.UUID, *outboxtype.Delivery]
	// record batches the attempts of one endpoint only: a batch locks one
	// endpoint row, in the order every statement takes it (endpoint, then
	// delivery, then lease), and an endpoint whose row is held elsewhere
	// (an application's EndpointUpdateTx, a deletion) delays its own
	// attempts' records only.
	record *groupcommit.Keyed[uuid.UUID, *dbsqlc.OutboxAttemptRecordParams, *dbsqlc.OutboxAttemptRecordRow]
}

func (o *Outbox) newCombiners() *combiners {
	return &combiners{
		load: groupcommit.New(groupcommit.Config[uuid.UUID]{MaxSize: combineMax, Slots: combineSlots, Timeout: recordTimeout}, o.loadMany),
		record: groupcommit.NewKeyed(groupcommit.Config[*dbsqlc.OutboxAttemptRecordParams]{MaxSize: combineMax, Slots: combineSlots, Timeout: recordTimeout},
			func(ctx context.Context, _ uuid.UUID, params []*dbsqlc.OutboxAttemptRecordParams) ([]*dbsqlc.OutboxAttemptRecordRow, []error) {
				return o.recordMany(ctx, params)
			}),
	}
}

// loadDelivery returns everything an attempt of delivery id needs;
// pgx.ErrNoRows when the delivery no longer exists.
func (o *Outbox) loadDelivery(ctx context.Context, id uuid.UUID) (*outboxtype.Delivery, error) {
	return o.combined.load.Do(ctx, id)
}

// loadMany runs with a generic plan: a custom one, which Postgres chose on
// every call (the events are day-partitioned), cost twice the lookup's run
// to plan.
func (o *Outbox) loadMany(ctx context.Context, ids []uuid.UUID) ([]*outboxtype.Delivery, []error) {
	rows, err := dbsqlc.New(pgxtx.GenericPlans{DBTX: o.pool}).OutboxDeliveryGetForWork(ctx, pgxtx.UUIDTexts(ids))
	if err != nil {
		return make([]*outboxtype.Delivery, len(ids)), groupcommit.Fail(len(ids), err)
	}
	byID := make(map[uuid.UUID]*outboxtype.Delivery, len(rows))
	for i := range rows {
		byID[rows[i].ID] = attemptFromRow(&rows[i])
	}
	outs := make([]*outboxtype.Delivery, len(ids))
	var errs []error
	for i, id := range ids {
		if outs[i] = byID[id]; outs[i] == nil {
			if errs == nil {
				errs = make([]error, len(ids))
			}
			errs[i] = pgx.ErrNoRows
		}
	}
	return outs, errs
}

// attemptFromRow is the attempt value of a loaded row: the one place a
// worker reads the row.
func attemptFromRow(row *dbsqlc.OutboxDeliveryGetForWorkRow) *outboxtype.Delivery {
	return &outboxtype.Delivery{
		ID:                      row.ID,
		Seq:                     row.Seq,
		EventID:                 outboxtype.FormatEventID(row.EventID),
		EventCreatedAt:          row.EventCreatedAt,
		EndpointID:              row.EndpointID,
		OrderingKey:             row.OrderingKey,
		Status:                  row.Status,
		Attempts:                row.Attempts,
		Generation:              row.Generation,
		ThrottledUntil:          row.ThrottledUntil,
		URL:                     row.Url,
		Secret:                  row.Secret,
		PreviousSecret:          row.PreviousSecret,
		PreviousSecretExpiresAt: row.PreviousSecretExpiresAt,
		MaxInFlight:             row.MaxInFlight,
		Timeout:                 time.Duration(row.TimeoutMs) * time.Millisecond,
		Ordered:                 row.Ordered,
		Enabled:                 row.Enabled,
		Headers:                 outboxtype.DecodeHeaders(row.Headers),
		Auth:                    row.Auth,
		RateLimitPerSecond:      row.RateLimitPerSecond,
		CircuitState:            row.CircuitState,
		CircuitOpenUntil:        row.CircuitOpenUntil,
		CircuitProbeExpiresAt:   row.CircuitProbeExpiresAt,
		EndpointVersion:         row.EndpointVersion,
		Payload:                 row.Payload,
		TraceContext:            row.TraceContext,
		DBNow:                   row.DbNow,
	}
}

// recordMany records attempts in pipelined transactions, one per endpoint
// (the Combiner gives it one endpoint's attempts; a mixed call is split),
// each sorted by lease slot, then delivery: every statement that locks
// more than one of an endpoint's slots (OutboxLeaseAcquireCounted) locks
// them in slot order. Should a transaction fail, each of its attempts is
// recorded on its own, so that one attempt's failure is only its own.
// Every transaction gets recordTimeout of its own.
func (o *Outbox) recordMany(ctx context.Context, params []*dbsqlc.OutboxAttemptRecordParams) ([]*dbsqlc.OutboxAttemptRecordRow, []error) {
	ctx = context.WithoutCancel(ctx)
	outs := make([]*dbsqlc.OutboxAttemptRecordRow, len(params))
	errs := make([]error, len(params))
	order := make([]int, len(params))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		pa, pb := params[a], params[b]
		return cmp.Or(slices.Compare(pa.EndpointID[:], pb.EndpointID[:]),
			cmp.Compare(pa.LeaseSlot, pb.LeaseSlot), slices.Compare(pa.DeliveryID[:], pb.DeliveryID[:]))
	})
	for len(order) > 0 {
		n := 1
		for n < len(order) && params[order[n]].EndpointID == params[order[0]].EndpointID {
			n++
		}
		group := order[:n]
		order = order[n:]
		var failed error
		if allSucceeded(params, group) {
			failed = o.recordSucceeded(ctx, params, group, outs, errs)
		} else {
			failed = o.recordBatch(ctx, params, group, outs, errs)
		}
		if failed == nil {
			continue
		}
		if len(group) == 1 {
			errs[group[0]] = failed
			continue
		}
		// The transaction rolled back: nothing of it was recorded.
		for _, i := range group {
			outs[i], errs[i] = nil, nil
			if err := o.recordBatch(ctx, params, []int{i}, outs, errs); err != nil {
				errs[i] = err
			}
		}
	}
	return outs, errs
}

// recordBatch runs the records params[i] for i in order in one pipelined
// transaction, setting outs[i] and errs[i] (pgx.ErrNoRows: the delivery was
// not the attempt's to record). It returns an error when the transaction
// failed, which then recorded nothing.
func (o *Outbox) recordBatch(ctx context.Context, params []*dbsqlc.OutboxAttemptRecordParams, order []int,
	outs []*dbsqlc.OutboxAttemptRecordRow, errs []error,
) error {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	batch := make([]dbsqlc.OutboxAttemptRecordParams, len(order))
	for k, i := range order {
		batch[k] = *params[i]
	}
	results := o.queries.OutboxAttemptRecord(ctx, batch)
	var failed error
	results.QueryRow(func(k int, row dbsqlc.OutboxAttemptRecordRow, err error) {
		i := order[k]
		switch {
		case err == nil:
			outs[i] = &row
		case errors.Is(err, pgx.ErrNoRows):
			errs[i] = err
		default:
			failed = cmp.Or(failed, err)
		}
	})
	// Closing again returns how the transaction ended: whether it committed.
	if err := results.Close(); err != nil {
		failed = cmp.Or(failed, err)
	}
	if failed != nil {
		return fmt.Errorf("record attempt: %w", failed)
	}
	return nil
}

// allSucceeded reports whether the attempts params[i], i in group, are
// successes of distinct deliveries, more than one: what
// OutboxAttemptRecordSucceeded records in one statement.
func allSucceeded(params []*dbsqlc.OutboxAttemptRecordParams, group []int) bool {
	if len(group) < 2 {
		return false
	}
	seen := make(map[uuid.UUID]bool, len(group))
	for _, i := range group {
		p := params[i]
		if !p.Succeeded || p.Gone || p.Error != "" || p.StatusCode == nil || seen[p.DeliveryID] {
			return false
		}
		seen[p.DeliveryID] = true
	}
	return true
}

// recordSucceeded records the successful attempts params[i], i in group,
// all of one endpoint, in one statement, setting outs[i] and errs[i]
// (pgx.ErrNoRows: the delivery was not the attempt's to record) as
// recordBatch does. It returns an error when the statement failed, which
// then recorded nothing.
func (o *Outbox) recordSucceeded(ctx context.Context, params []*dbsqlc.OutboxAttemptRecordParams, group []int,
	outs []*dbsqlc.OutboxAttemptRecordRow, errs []error,
) error {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	rows, err := o.queries.OutboxAttemptRecordSucceeded(ctx, succeededArg(params, group))
	if err != nil {
		return fmt.Errorf("record attempts: %w", err)
	}
	byID := make(map[uuid.UUID]dbsqlc.OutboxAttemptRecordSucceededRow, len(rows))
	for _, r := range rows {
		byID[r.DeliveryID] = r
	}
	for _, i := range group {
		r, ok := byID[params[i].DeliveryID]
		if !ok {
			errs[i] = pgx.ErrNoRows
			continue
		}
		outs[i] = &dbsqlc.OutboxAttemptRecordRow{Attempts: r.Attempts, CircuitClosed: r.CircuitClosed, EndpointVersion: r.EndpointVersion}
	}
	return nil
}

// succeededArg is OutboxAttemptRecordSucceeded's argument for the
// attempts params[i], i in group (see recordSucceeded).
func succeededArg(params []*dbsqlc.OutboxAttemptRecordParams, group []int) dbsqlc.OutboxAttemptRecordSucceededParams {
	arg := dbsqlc.OutboxAttemptRecordSucceededParams{EndpointID: params[group[0]].EndpointID}
	for _, i := range group {
		p := params[i]
		arg.DeliveryIds = append(arg.DeliveryIds, p.DeliveryID.String())
		arg.Generations = append(arg.Generations, p.Generation)
		arg.AttemptIds = append(arg.AttemptIds, p.AttemptID.String())
		arg.AttemptedAts = append(arg.AttemptedAts, p.AttemptedAt)
		arg.StatusCodes = append(arg.StatusCodes, *p.StatusCode)
		arg.ResponseBodies = append(arg.ResponseBodies, p.ResponseBody)
		arg.ResponseTruncated = append(arg.ResponseTruncated, p.ResponseTruncated)
		arg.DurationsUs = append(arg.DurationsUs, p.DurationUs)
		arg.LeaseSlots = append(arg.LeaseSlots, p.LeaseSlot)
		arg.Nows = append(arg.Nows, p.Now)
		if p.Now.After(arg.Now) {
			arg.Now, arg.StaleBefore = p.Now, p.StaleBefore
		}
	}
	return arg
}
