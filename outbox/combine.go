package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/shared"
)

// The delivery worker's three statements (load the delivery, take a
// concurrency slot, record the attempt) are combined across the deliveries
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
	load   *shared.Combiner[uuid.UUID, *dbsqlc.OutboxDeliveryGetForWorkRow]
	lease  *shared.Combiner[leaseAsk, int32]
	record *shared.Combiner[*dbsqlc.OutboxAttemptRecordParams, *dbsqlc.OutboxAttemptRecordRow]
}

func (o *Outbox) newCombiners() *combiners {
	return &combiners{
		load:   shared.NewCombiner(combineMax, combineSlots, recordTimeout, o.loadMany),
		lease:  shared.NewCombiner(combineMax, combineSlots, recordTimeout, o.leaseMany),
		record: shared.NewCombiner(combineMax, combineSlots, recordTimeout, o.recordMany),
	}
}

// loadDelivery returns everything an attempt of delivery id needs;
// pgx.ErrNoRows when the delivery no longer exists.
func (o *Outbox) loadDelivery(ctx context.Context, id uuid.UUID) (*dbsqlc.OutboxDeliveryGetForWorkRow, error) {
	return o.combined.load.Do(ctx, id)
}

func (o *Outbox) loadMany(ctx context.Context, ids []uuid.UUID) ([]*dbsqlc.OutboxDeliveryGetForWorkRow, []error) {
	rows, err := o.queries.OutboxDeliveryGetForWorkMany(ctx, uuidStrings(ids))
	if err != nil {
		return make([]*dbsqlc.OutboxDeliveryGetForWorkRow, len(ids)), shared.Fail(len(ids), err)
	}
	byID := make(map[uuid.UUID]*dbsqlc.OutboxDeliveryGetForWorkRow, len(rows))
	for i := range rows {
		row := dbsqlc.OutboxDeliveryGetForWorkRow(rows[i])
		byID[row.ID] = &row
	}
	outs := make([]*dbsqlc.OutboxDeliveryGetForWorkRow, len(ids))
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

// leaseAsk is a delivery asking for a concurrency slot of its endpoint.
type leaseAsk struct {
	endpointID, deliveryID uuid.UUID
	seconds                float64 // the lease's length
}

// takeSlot takes a free slot of the endpoint's cap for the delivery, as
// OutboxLeaseAcquire does, in one statement with the other deliveries
// asking at the same time; noLease when it found none free and unlocked.
func (o *Outbox) takeSlot(ctx context.Context, ask leaseAsk) (int32, error) {
	return o.combined.lease.Do(ctx, ask)
}

func (o *Outbox) leaseMany(ctx context.Context, asks []leaseAsk) ([]int32, []error) {
	slots := make([]int32, len(asks))
	for i := range slots {
		slots[i] = noLease
	}
	var errs []error
	// One statement per endpoint and lease length, in the order asked.
	type group struct {
		endpointID uuid.UUID
		seconds    float64
	}
	done := make(map[group]bool)
	for i, ask := range asks {
		g := group{ask.endpointID, ask.seconds}
		if done[g] {
			continue
		}
		done[g] = true
		var members []int
		var ids []string
		for j := i; j < len(asks); j++ {
			if asks[j].endpointID == g.endpointID && asks[j].seconds == g.seconds {
				members = append(members, j)
				ids = append(ids, asks[j].deliveryID.String())
			}
		}
		rows, err := o.queries.OutboxLeaseAcquireMany(ctx, dbsqlc.OutboxLeaseAcquireManyParams{
			EndpointID: g.endpointID, DeliveryIds: ids, LeaseSeconds: g.seconds,
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

// recordMany records attempts in one pipelined transaction, sorted by
// endpoint and delivery so that concurrent batches lock rows in one order.
// Should the transaction fail, each attempt is recorded on its own, so that
// one attempt's failure is its own.
func (o *Outbox) recordMany(ctx context.Context, params []*dbsqlc.OutboxAttemptRecordParams) ([]*dbsqlc.OutboxAttemptRecordRow, []error) {
	outs := make([]*dbsqlc.OutboxAttemptRecordRow, len(params))
	errs := make([]error, len(params))
	order := make([]int, len(params))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		pa, pb := params[a], params[b]
		return cmp.Or(slices.Compare(pa.EndpointID[:], pb.EndpointID[:]), slices.Compare(pa.DeliveryID[:], pb.DeliveryID[:]))
	})
	failed := o.recordBatch(ctx, params, order, outs, errs)
	if failed == nil || len(params) == 1 {
		if failed != nil {
			errs[0] = failed
		}
		return outs, errs
	}
	// The transaction rolled back: nothing of it was recorded.
	for _, i := range order {
		outs[i], errs[i] = nil, nil
		if err := o.recordBatch(ctx, params, []int{i}, outs, errs); err != nil {
			errs[i] = err
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
	// Closing reads the end of the transaction: whether it committed.
	if err := results.Close(); err != nil && !errors.Is(err, dbsqlc.ErrBatchAlreadyClosed) {
		failed = cmp.Or(failed, err)
	}
	if failed != nil {
		return fmt.Errorf("record attempt: %w", failed)
	}
	return nil
}

// uuidStrings returns ids as text, the form a uuid[] parameter takes in
// every query mode (PgBouncer's included).
func uuidStrings(ids []uuid.UUID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}
