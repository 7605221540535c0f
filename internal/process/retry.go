package process

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/pgxtx"
)

// diesInBatch reports whether cause, a handler's failure in a batch, makes
// its message dead in the batch's transaction (see retryAlone).
func (p *Processor) diesInBatch(cause error) bool {
	return !usesNoAttempt(cause) && failureStatus(cause, 1, p.config.Jobs.MaxAttempts()) == inboxjob.StatusDead
}

// retryAlone records a batch handler's failure on msg in tx and, unless
// the message is now dead, inserts a job of its own that retries it. A
// snooze uses no attempt and runs again after its duration; a lost
// conflict (see lostConflict) uses none either and runs again at once.
// (The handler's savepoint was rolled back, its message's mark with it.)
func (p *Processor) retryAlone(ctx context.Context, tx pgx.Tx, msg *dbsqlc.WharfInboxMessage, cause error) error {
	args := inboxjob.ProcessArgs{MessageID: msg.ID, ReceivedAt: msg.ReceivedAt}
	var snooze *river.JobSnoozeError
	var waiting *orderingWaitError
	switch {
	case errors.As(cause, &waiting):
		// Its job runs now and, while the earlier message of its key is
		// unfinished, snoozes itself briefly (a short snooze keeps the job
		// available; a job inserted for later waits for River's
		// scheduler, seconds).
	case lostConflict(cause):
		// Its job runs now, after this batch has committed and let go of
		// the rows its other handlers locked, using no attempt.
	case errors.As(cause, &snooze):
		at := time.Now().Add(snooze.Duration)
		args.NotBefore = &at
	default:
		dead, err := p.recordInBatch(ctx, tx, msg, cause)
		if err != nil || dead {
			return err
		}
		// This attempt counted: the retry job's first run stands for it
		// and hands it to River, which schedules the retry by the client's
		// RetryPolicy (see inboxjob.ProcessArgs.FailedInBatch); its other
		// attempts are the rest.
		args.FailedInBatch = true
	}
	insert := river.InsertManyParams{Args: args, InsertOpts: p.config.Jobs.Opts()}
	if _, err := p.config.Jobs.Assign(ctx, tx, []river.InsertManyParams{insert}); err != nil {
		return fmt.Errorf("inbox: retry job: %w", err)
	}
	return nil
}

// recordInBatch records a batch handler's failure on msg in tx, the
// batch's transaction; dead reports that it made msg dead, which wakes the
// next message of its ordering key.
func (p *Processor) recordInBatch(ctx context.Context, tx pgx.Tx, msg *dbsqlc.WharfInboxMessage, cause error) (dead bool, err error) {
	status := failureStatus(cause, 1, p.config.Jobs.MaxAttempts())
	recorded, err := dbsqlc.New(tx).InboxMessageMarkFailed(ctx, dbsqlc.InboxMessageMarkFailedParams{
		Status:     status,
		LastError:  inboxjob.LastError(cause.Error()),
		Now:        p.config.Now(),
		ReceivedAt: msg.ReceivedAt,
		ID:         msg.ID,
		JobID:      inboxjob.JobID(msg),
		Attempts:   msg.Attempts,
	})
	if err != nil {
		return false, fmt.Errorf("inbox: record failure: %w", err)
	}
	if recorded == 0 {
		// The batch has held the row since it read it: nothing can
		// have changed it. Should it have, nothing of the batch
		// commits, and its messages go on alone (see split).
		return false, fmt.Errorf("inbox: message %s changed under the batch's lock", msg.ID)
	}
	if status != inboxjob.StatusDead {
		return false, nil
	}
	return true, p.config.Ordering.WakeNext(ctx, tx, msg)
}

// splitTimeout bounds the split of a batch whose transaction failed,
// which goes on when the job's context is done.
const splitTimeout = 10 * time.Second

// splitAfter splits the batch after its transaction failed with err.
// Nothing of the batch committed: splitting it now means one bad message
// (a handler outliving the job's timeout, say) costs its neighbours one
// delay at most; if that fails too, River retries and the next attempt
// splits.
func (b *batch) splitAfter(ctx context.Context, err error) error {
	b.log.WarnContext(ctx, "inbox: batch transaction failed; its messages continue on jobs of their own", "error", err)
	splitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), splitTimeout)
	defer cancel()
	if splitErr := b.split(splitCtx); splitErr != nil {
		b.log.WarnContext(ctx, "inbox: could not split a failed batch into jobs of their own; River runs the batch job again", "error", splitErr)
		return errors.Join(err, splitErr)
	}
	return nil
}

// split gives every message still waiting for the batch's job a job of
// its own, with a full set of attempts (the batch's failed transaction
// recorded none), and completes the batch's job, in one transaction.
func (b *batch) split(ctx context.Context) error {
	job := b.job
	var moved int
	err := pgx.BeginFunc(ctx, b.p.config.Pool, func(tx pgx.Tx) error {
		q := dbsqlc.New(pgxtx.GenericPlans{DBTX: tx})
		rows, err := q.InboxMessagesGetForUpdate(ctx, dbsqlc.InboxMessagesGetForUpdateParams{
			ReceivedAt: job.Args.ReceivedAt, Ids: pgxtx.UUIDTexts(job.Args.MessageIDs),
		})
		if err != nil {
			return fmt.Errorf("inbox: load messages: %w", err)
		}
		var params []river.InsertManyParams
		for i := range rows {
			if !inboxjob.OwnedBy(&rows[i], job.ID) {
				continue
			}
			one := b.p.config.Jobs.One(rows[i].ID, rows[i].ReceivedAt, rows[i].OrderingKey == "")
			one.InsertOpts.Queue = job.Queue // stay on the queue the batch was on
			params = append(params, one)
		}
		if len(params) > 0 {
			if _, err := b.p.config.Jobs.Assign(ctx, tx, params); err != nil {
				return err
			}
		}
		moved = len(params)
		return completeJob(ctx, tx, job)
	})
	if err != nil {
		return fmt.Errorf("inbox: split batch: %w", err)
	}
	b.log.DebugContext(ctx, "inbox: batch split into jobs of their own", "messages", moved)
	return nil
}
