package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/shared"
)

// handOver is a delivery at generation that a batch job (or Rescue) gives
// a new job, to run at at; ref is its place in the batch (its
// AttemptsBefore: what the delivery's attempts were before its batch).
// Handing over is the one word for it, in the code, the logs and the SQL
// (OutboxDeliveryHandOver).
type handOver struct {
	id, endpointID uuid.UUID
	generation     int32
	ref            Ref
	at             time.Time
	// batch, above 0, numbers the new batch job the delivery shares with
	// the others of the same number (one alone gets a job of its own); 0:
	// a job of its own.
	batch int
	// cutOff is true when the batch's attempt of the delivery was cut off
	// by the client's stop: recorded, but not counted against the
	// delivery's attempts (its new job makes that attempt again).
	cutOff bool
}

// handOverOf is the hand-over of d, loaded by a batch job, at its place
// ref, to run at at.
func handOverOf(d *outboxtype.Delivery, ref Ref, at time.Time) handOver {
	return handOver{id: d.ID, endpointID: d.EndpointID, generation: d.Generation, ref: ref, at: at}
}

// handOverOrSnooze hands over as handOver does; a transient database
// error snoozes the job (using no attempt: a last run stays the last), any
// other fails the run.
func (e *Engine) handOverOrSnooze(ctx context.Context, log *slog.Logger, job *river.Job[BatchArgs], over []handOver) error {
	if err := e.handOver(ctx, log, over); err != nil {
		return e.databaseError(context.WithoutCancel(ctx), log, shared.SnoozeCount(job.Metadata), fmt.Errorf("hand deliveries over to jobs of their own: %w", err))
	}
	return nil
}

// handOver moves each delivery of over to its next generation and inserts
// its new job, due at its time, in one transaction: the batch job's later
// runs leave it alone. A job of its own goes on from the attempts the batch
// job made; a new batch job makes the first attempt of each of its
// deliveries that the batch job did not reach.
func (e *Engine) handOver(ctx context.Context, log *slog.Logger, over []handOver) error {
	if len(over) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		_, err := e.handOverTx(ctx, tx, over)
		return err
	})
	if err != nil {
		return err
	}
	log.DebugContext(ctx, "outbox: deliveries handed over to new jobs", "deliveries", len(over))
	return nil
}

// handOverTx is handOver in tx, and returns the deliveries it handed over:
// those still unfinished at the generation of their hand-over as it locked
// them (the others were finished, replayed or deleted meanwhile).
func (e *Engine) handOverTx(ctx context.Context, tx pgx.Tx, over []handOver) (map[uuid.UUID]bool, error) {
	if len(over) == 0 {
		return nil, nil
	}
	params := dbsqlc.OutboxDeliveryHandOverParams{Now: e.now()}
	batchOf := make(map[uuid.UUID]int, len(over))
	for _, h := range over {
		params.Ids = append(params.Ids, h.id.String())
		params.Generations = append(params.Generations, h.generation)
		batchOf[h.id] = h.batch
	}
	rows, err := e.queries.WithTx(tx).OutboxDeliveryHandOver(ctx, params)
	if err != nil {
		return nil, err
	}
	handed := make(map[uuid.UUID]dbsqlc.OutboxDeliveryHandOverRow, len(rows))
	members := make(map[int]int, len(rows)) // deliveries of each new batch job
	for _, row := range rows {
		handed[row.ID] = row
		members[batchOf[row.ID]]++
	}
	var jobs []river.InsertManyParams
	batches := make(map[int]int) // the index in jobs of each new batch job
	done := make(map[uuid.UUID]bool, len(rows))
	for _, h := range over {
		row, ok := handed[h.id]
		if !ok || done[h.id] {
			continue // finished, replayed or deleted meanwhile
		}
		done[h.id] = true
		at := h.at
		if row.NextAttemptAt != nil && row.NextAttemptAt.After(at) {
			// Recorded by the attempt (Retry-After, throttling), before
			// a run that stopped short of handing it over.
			at = *row.NextAttemptAt
		}
		if h.batch == 0 || members[h.batch] == 1 {
			offset := int(row.Attempts) - h.ref.AttemptsBefore
			if h.cutOff {
				offset--
			}
			offset = max(offset, 0)
			opts := e.insertOpts(0)
			opts.MaxAttempts = max(opts.MaxAttempts-offset, spareRuns+1)
			scheduleAt(opts, at)
			jobs = append(jobs, river.InsertManyParams{
				Args:       Args{DeliveryID: row.ID, Generation: int(row.Generation), AttemptOffset: offset},
				InsertOpts: opts,
			})
			continue
		}
		ref := Ref{DeliveryID: row.ID, Generation: int(row.Generation), AttemptsBefore: int(row.Attempts)}
		if i, ok := batches[h.batch]; ok {
			args := jobs[i].Args.(BatchArgs)
			args.Deliveries = append(args.Deliveries, ref)
			jobs[i].Args = args
			scheduleAt(jobs[i].InsertOpts, at)
			continue
		}
		batches[h.batch] = len(jobs)
		opts := e.insertOpts(0)
		scheduleAt(opts, at)
		jobs = append(jobs, river.InsertManyParams{
			Args:       BatchArgs{EndpointID: h.endpointID, Deliveries: []Ref{ref}},
			InsertOpts: opts,
		})
	}
	if len(jobs) == 0 {
		return done, nil
	}
	if _, err := e.inserter.InsertManyFastTx(ctx, tx, jobs); err != nil {
		return nil, err
	}
	return done, nil
}
