package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/pgxtx"
)

// RescueInterval is how often the outbox's periodic job (see PeriodicJobs)
// looks for stranded deliveries.
const RescueInterval = 5 * time.Minute

// RescueAfter is how long a delivery must have been left unchanged, and
// overdue, before Rescue treats it as stranded: the transactions that give
// deliveries jobs commit in moments, and one a moment old may be in the
// middle of one.
const RescueAfter = time.Minute

// maxRescue bounds the deliveries one Rescue settles; the next run takes
// the rest.
const maxRescue = 1000

// rescueArgs are the args of the outbox's periodic rescue job.
type rescueArgs struct{}

// Kind is the River job kind of the outbox's periodic rescue.
func (rescueArgs) Kind() string { return "wharf_outbox_rescue" }

type rescueWorker struct {
	river.WorkerDefaults[rescueArgs]
	outbox *Outbox
}

// Timeout lets a rescue over a large backlog finish: it runs once per
// RescueInterval.
func (w *rescueWorker) Timeout(*river.Job[rescueArgs]) time.Duration { return RescueInterval }

func (w *rescueWorker) Work(ctx context.Context, _ *river.Job[rescueArgs]) error {
	_, err := w.outbox.Rescue(ctx)
	return err
}

// PeriodicJobs returns the outbox's periodic job, for your River client's
// Config.PeriodicJobs (wharfriver.Configure adds it): every RescueInterval,
// and when the client starts, it runs Rescue on the outbox's queue. Its
// worker is registered by AddWorkers.
func (o *Outbox) PeriodicJobs() []*river.PeriodicJob {
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(RescueInterval),
		func() (river.JobArgs, *river.InsertOpts) {
			// One per interval, even while an earlier one retries.
			return rescueArgs{}, &river.InsertOpts{Queue: o.config.Queue, UniqueOpts: river.UniqueOpts{ByPeriod: RescueInterval}}
		},
		&river.PeriodicJobOpts{ID: rescueArgs{}.Kind(), RunOnStart: true})}
}

// Rescue finds the unfinished deliveries that no River job will attempt
// (left unchanged, and overdue, for RescueAfter or more) and settles each,
// returning how many it settled. None is left so in normal operation; a
// process that dies in the last run River allows a job (a batch job's, in
// which it hands its deliveries on; or one of its own, sending), a job
// cancelled while its process is dead (River's rescuer then cancels it,
// and no worker dead-letters its delivery), or a job deleted through
// River can leave one:
//
//   - a delivery whose job of its own (DeliveryArgs) was cancelled, or
//     whose batch job was, becomes dead, as a live worker makes it when
//     its job is cancelled: the operator asked for no more attempts, and
//     a new job would undo that;
//   - a delivery whose job of its own was discarded becomes dead, its
//     attempts exhausted: River allows such a job more runs than attempts
//     (spareRuns) so that its worker dead-letters the delivery itself, and
//     one discarded had its last run end without an outcome (its process
//     died, most likely on a request) past its attempts;
//   - a delivery whose batch job was discarded gets a job of its own at
//     once, going on from the attempts the batch made (a delivery whose
//     attempts are exhausted is then dead-lettered by that job's first
//     run, as by any job past its attempts), and so does one whose job was
//     deleted (or completed without it), its schedule starting afresh.
//     Sending again is safe where re-running an inbox handler is not: the
//     receiver dedupes on the webhook-id, and a batch job makes only the
//     first attempt of each delivery, so its runs dying say nothing of the
//     delivery's attempts.
//
// Each is settled by a statement that locks it and re-checks its
// generation and status: a delivery given a new job (a replay) or finished
// since Rescue found it is left alone. A delivery made dead is reported
// to Config.OnDead; each is logged as a warning. Dead ones can be
// replayed. The periodic job of PeriodicJobs calls it; an operator can
// too.
func (o *Outbox) Rescue(ctx context.Context) (int, error) {
	var settled []rescued
	err := o.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		settled, err = o.rescueTx(ctx, tx)
		return err
	})
	if err != nil {
		return 0, err
	}
	o.reportRescued(ctx, settled)
	return len(settled), nil
}

// RescueTx is Rescue in tx; Config.OnDead is called before it returns,
// whether tx commits or not. After an error tx may be aborted: roll it
// back.
func (o *Outbox) RescueTx(ctx context.Context, tx pgx.Tx) (int, error) {
	settled, err := o.rescueTx(ctx, tx)
	if err != nil {
		return 0, err
	}
	o.reportRescued(ctx, settled)
	return len(settled), nil
}

// rescued is a delivery Rescue settled: given a job of its own, or made
// dead (dead set, for reason).
type rescued struct {
	row    *dbsqlc.OutboxDeliveriesStrandedRow
	dead   *dbsqlc.OutboxDeliveryMarkDeadRow
	reason string
}

func (o *Outbox) rescueTx(ctx context.Context, tx pgx.Tx) ([]rescued, error) {
	q := o.queries.WithTx(tx)
	now := o.config.now()
	rows, err := q.OutboxDeliveriesStranded(ctx, dbsqlc.OutboxDeliveriesStrandedParams{
		Before: now.Add(-RescueAfter), Max: maxRescue, DeliveryKind: DeliveryKind, BatchKind: DeliveryBatchKind,
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: rescue: find stranded deliveries: %w", err)
	}
	if err := lockEndpointsOf(ctx, q, rows); err != nil {
		return nil, fmt.Errorf("outbox: rescue: lock endpoints: %w", err)
	}
	// In one order, so that two Rescues at once lock rows alike.
	slices.SortFunc(rows, func(a, b dbsqlc.OutboxDeliveriesStrandedRow) int { return slices.Compare(a.ID[:], b.ID[:]) })
	var settled []rescued
	var over []handOver
	onJob := make(map[uuid.UUID]*dbsqlc.OutboxDeliveriesStrandedRow)
	for i := range rows {
		row := &rows[i]
		reason, attemptsBefore := rescueDecision(row)
		if reason == "" {
			onJob[row.ID] = row
			over = append(over, handOver{id: row.ID, endpointID: row.EndpointID, generation: row.Generation,
				ref: DeliveryRef{AttemptsBefore: attemptsBefore}, at: time.Now()})
			continue
		}
		dead, err := q.OutboxDeliveryMarkDead(ctx, dbsqlc.OutboxDeliveryMarkDeadParams{
			ID: row.ID, Generation: row.Generation, Reason: reason, Now: now,
		})
		if errors.Is(err, pgx.ErrNoRows) {
			continue // given a job, finished or deleted since it was found
		}
		if err != nil {
			return nil, fmt.Errorf("outbox: rescue: dead-letter delivery %s: %w", row.ID, err)
		}
		settled = append(settled, rescued{row: row, dead: &dead, reason: reason})
	}
	handed, err := o.handOverTx(ctx, tx, over)
	if err != nil {
		return nil, fmt.Errorf("outbox: rescue: give deliveries jobs: %w", err)
	}
	for _, h := range over {
		if handed[h.id] {
			settled = append(settled, rescued{row: onJob[h.id]})
		}
	}
	return settled, nil
}

// lockEndpointsOf locks the endpoints of rows (see
// OutboxEndpointsLockKeyShare) before Rescue locks their deliveries.
func lockEndpointsOf(ctx context.Context, q *dbsqlc.Queries, rows []dbsqlc.OutboxDeliveriesStrandedRow) error {
	if len(rows) == 0 {
		return nil
	}
	seen := make(map[uuid.UUID]bool)
	var ids []uuid.UUID
	for _, row := range rows {
		if !seen[row.EndpointID] {
			seen[row.EndpointID] = true
			ids = append(ids, row.EndpointID)
		}
	}
	return q.OutboxEndpointsLockKeyShare(ctx, pgxtx.UUIDTexts(ids))
}

// rescueDecision says what Rescue does with a stranded delivery (see
// Rescue): make it dead for reason, or, reason empty, give it a job of its
// own going on from its attempts less attemptsBefore (what handOver takes:
// the attempts its generation made are the new job's offset).
func rescueDecision(row *dbsqlc.OutboxDeliveriesStrandedRow) (reason string, attemptsBefore int) {
	switch {
	case row.JobState == "cancelled":
		return reasonCancelled, 0
	case row.JobKind == DeliveryKind: // discarded
		return fmt.Sprintf("attempts exhausted: its River job %d was discarded, its last run ended without an outcome (its process died?)", row.JobID), 0
	case row.JobKind == DeliveryBatchKind: // discarded
		if ref, ok := refOf(row.JobArgs, row.ID, int(row.Generation)); ok {
			return "", ref.AttemptsBefore
		}
	}
	// No job left to tell: its schedule starts afresh.
	return "", int(row.Attempts)
}

// refOf returns the place of delivery id at generation in the batch job
// whose args are args.
func refOf(args json.RawMessage, id uuid.UUID, generation int) (DeliveryRef, bool) {
	var batch DeliveryBatchArgs
	if json.Unmarshal(args, &batch) != nil {
		return DeliveryRef{}, false
	}
	for _, ref := range batch.Deliveries {
		if ref.DeliveryID == id && ref.Generation == generation {
			return ref, true
		}
	}
	return DeliveryRef{}, false
}

// reportRescued logs what Rescue settled and reports the deliveries it
// made dead to Config.OnDead.
func (o *Outbox) reportRescued(ctx context.Context, settled []rescued) {
	for _, s := range settled {
		log := o.config.Logger.With("delivery_id", s.row.ID, "endpoint_id", s.row.EndpointID,
			"event_id", outboxtype.FormatEventID(s.row.EventID), "old_job_id", s.row.JobID, "old_job_state", s.row.JobState)
		if s.dead == nil {
			log.WarnContext(ctx, "outbox: rescued a delivery that no job would have attempted; it goes on in a job of its own")
			continue
		}
		log.WarnContext(ctx, "outbox: a delivery whose River job ended without it is dead", "reason", s.reason)
		o.markedDead(ctx, *s.dead, s.reason)
	}
}
