package delivery

import (
	"context"
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

// RescueInterval is how often the periodic rescue (PeriodicJobs) looks
// for stranded deliveries (outbox.RescueInterval).
const RescueInterval = 5 * time.Minute

// RescueAfter is how long a delivery must have been left unchanged, and
// overdue, before Rescue treats it as stranded (outbox.RescueAfter): the
// transactions that give deliveries jobs commit in moments, and one a
// moment old may be in the middle of one.
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
	engine *Engine
}

// Timeout lets a rescue over a large backlog finish: it runs once per
// RescueInterval.
func (w *rescueWorker) Timeout(*river.Job[rescueArgs]) time.Duration { return RescueInterval }

func (w *rescueWorker) Work(ctx context.Context, _ *river.Job[rescueArgs]) error {
	_, err := w.engine.Rescue(ctx)
	return err
}

// PeriodicJobs returns the periodic rescue (outbox.PeriodicJobs documents
// it).
func (e *Engine) PeriodicJobs() []*river.PeriodicJob {
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(RescueInterval),
		func() (river.JobArgs, *river.InsertOpts) {
			// One per interval, even while an earlier one retries.
			return rescueArgs{}, &river.InsertOpts{Queue: e.config.Queue, UniqueOpts: river.UniqueOpts{ByPeriod: RescueInterval}}
		},
		&river.PeriodicJobOpts{ID: rescueArgs{}.Kind(), RunOnStart: true})}
}

// Rescue settles, in a transaction of its own, the unfinished deliveries
// that no River job will attempt (outbox.Rescue documents how), and
// reports them after it commits.
func (e *Engine) Rescue(ctx context.Context) (int, error) {
	var settled []rescued
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		settled, err = e.rescueTx(ctx, tx)
		return err
	})
	if err != nil {
		return 0, err
	}
	e.reportRescued(ctx, settled)
	return len(settled), nil
}

// RescueTx is Rescue in tx; Config.OnDead is called before it returns,
// whether tx commits or not.
func (e *Engine) RescueTx(ctx context.Context, tx pgx.Tx) (int, error) {
	settled, err := e.rescueTx(ctx, tx)
	if err != nil {
		return 0, err
	}
	e.reportRescued(ctx, settled)
	return len(settled), nil
}

// rescued is a delivery Rescue settled: given a job of its own, or made
// dead (dead set, for reason).
type rescued struct {
	row    *dbsqlc.OutboxDeliveriesStrandedRow
	dead   *dbsqlc.OutboxDeliveryMarkDeadRow
	reason string
}

func (e *Engine) rescueTx(ctx context.Context, tx pgx.Tx) ([]rescued, error) {
	q := e.queries.WithTx(tx)
	now := e.now()
	find := dbsqlc.OutboxDeliveriesStrandedParams{
		Before: now.Add(-RescueAfter), Max: maxRescue, DeliveryKind: Kind, BatchKind: BatchKind,
	}
	found, err := q.OutboxDeliveriesStranded(ctx, find)
	if err != nil {
		return nil, fmt.Errorf("outbox: rescue: find stranded deliveries: %w", err)
	}
	if len(found) == 0 {
		return nil, nil
	}
	if err := lockEndpointsOf(ctx, q, found); err != nil {
		return nil, fmt.Errorf("outbox: rescue: lock endpoints: %w", err)
	}
	// Asked again, in a snapshot taken after the locks (which may have
	// waited): what the first answer said of their jobs may have changed
	// since, as when an operator retries a cancelled job through River,
	// which changes no delivery for the statements below to notice. What
	// is still stranded now, they settle, each re-checking its row.
	for i := range found {
		find.Ids = append(find.Ids, found[i].ID.String())
	}
	rows, err := q.OutboxDeliveriesStranded(ctx, find)
	if err != nil {
		return nil, fmt.Errorf("outbox: rescue: check stranded deliveries: %w", err)
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
				ref: Ref{AttemptsBefore: attemptsBefore}, at: time.Now()})
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
	handed, err := e.handOverTx(ctx, tx, over)
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
// own going on from its attempts less attemptsBefore (what a hand-over takes:
// the attempts its generation made are the new job's offset).
func rescueDecision(row *dbsqlc.OutboxDeliveriesStrandedRow) (reason string, attemptsBefore int) {
	switch {
	case row.JobState == "cancelled":
		return reasonCancelled, 0
	case row.JobKind == Kind: // discarded
		return fmt.Sprintf("attempts exhausted: its River job %d was discarded, its last run ended without an outcome (its process died?)", row.JobID), 0
	case row.JobKind == BatchKind: // discarded
		if ref, ok := refOf(row.JobArgs, row.ID, int(row.Generation)); ok {
			return "", ref.AttemptsBefore
		}
	}
	// No job left to tell: its schedule starts afresh.
	return "", int(row.Attempts)
}

// reportRescued logs what Rescue settled and reports the deliveries it
// made dead to Config.OnDead.
func (e *Engine) reportRescued(ctx context.Context, settled []rescued) {
	for _, s := range settled {
		log := e.config.Logger.With("delivery_id", s.row.ID, "endpoint_id", s.row.EndpointID,
			"event_id", outboxtype.FormatEventID(s.row.EventID), "old_job_id", s.row.JobID, "old_job_state", s.row.JobState)
		if s.dead == nil {
			log.WarnContext(ctx, "outbox: rescued a delivery that no job would have attempted; it goes on in a job of its own")
			continue
		}
		log.WarnContext(ctx, "outbox: a delivery whose River job ended without it is dead", "reason", s.reason)
		e.markedDead(ctx, *s.dead, s.reason)
	}
}
