package inbox

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
)

// RescueInterval is how often the inbox's periodic job (see PeriodicJobs)
// looks for stranded messages.
const RescueInterval = 5 * time.Minute

// RescueAfter is how long a message must have been left unchanged before
// Rescue treats it as stranded: the transactions that give messages jobs
// commit in moments, and a message a moment old may be in the middle of
// one.
const RescueAfter = time.Minute

// maxRescue bounds the messages one Rescue hands jobs to; the next run
// takes the rest.
const maxRescue = 1000

type rescueWorker struct {
	river.WorkerDefaults[inboxjob.RescueArgs]
	ib *Inbox
}

// Timeout lets a rescue over a large backlog finish: it runs once per
// RescueInterval.
func (w *rescueWorker) Timeout(*river.Job[inboxjob.RescueArgs]) time.Duration { return RescueInterval }

func (w *rescueWorker) Work(ctx context.Context, _ *river.Job[inboxjob.RescueArgs]) error {
	_, err := w.ib.Rescue(ctx)
	return err
}

// PeriodicJobs returns the inbox's periodic job, for your River client's
// Config.PeriodicJobs (wharfriver.Configure adds it): every RescueInterval,
// and when the client starts, it runs Rescue on the inbox's queue. Its
// worker is registered by AddWorkers.
func (ib *Inbox) PeriodicJobs() []*river.PeriodicJob {
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(RescueInterval),
		func() (river.JobArgs, *river.InsertOpts) {
			// One per interval, even while an earlier one retries.
			return inboxjob.RescueArgs{}, &river.InsertOpts{Queue: ib.queue, UniqueOpts: river.UniqueOpts{ByPeriod: RescueInterval}}
		},
		&river.PeriodicJobOpts{ID: inboxjob.RescueArgs{}.Kind(), RunOnStart: true})}
}

// Rescue finds the unfinished messages that nothing would run (RescueAfter
// or more since they last changed) and settles each, returning how many it
// settled. Neither kind happens in normal operation; a crash between two
// transactions, a process that dies in a handler, a failure to record a
// handler's failure, or a job cancelled or deleted through River rather
// than with Skip or Forget can leave one:
//
//   - a message parked behind an earlier one of its ordering key that
//     finished without waking it, or on a River job that completed without
//     processing it, gets a new job;
//   - a message whose River job was discarded (its attempts used up, no
//     failure recorded: the process died in its handler, most likely),
//     cancelled, or deleted becomes dead, with the reason as its last
//     error, Config.OnDead is called, and the next message of its ordering
//     key goes on. Replay runs it again once its cause is dealt with; a new
//     job would only run it out of its order, or crash the process again.
//
// Each is logged as a warning. The periodic job of PeriodicJobs calls it; an
// operator can too.
func (ib *Inbox) Rescue(ctx context.Context) (int, error) {
	var settled []stranded
	err := ib.txFunc(ctx, func(tx pgx.Tx) error {
		var err error
		settled, err = ib.rescueTx(ctx, tx)
		return err
	})
	if err != nil {
		return 0, err
	}
	ib.reportRescued(ctx, settled)
	return len(settled), nil
}

// RescueTx is Rescue in tx; Config.OnDead is called before it returns,
// whether tx commits or not.
func (ib *Inbox) RescueTx(ctx context.Context, tx pgx.Tx) (int, error) {
	settled, err := ib.rescueTx(ctx, tx)
	if err != nil {
		return 0, err
	}
	ib.reportRescued(ctx, settled)
	return len(settled), nil
}

// stranded is a message Rescue settled: given a new job (jobID), or made
// dead (cause).
type stranded struct {
	msg      *dbsqlc.WharfInboxMessage
	jobState string
	jobID    int64
	cause    error
}

func (ib *Inbox) rescueTx(ctx context.Context, tx pgx.Tx) ([]stranded, error) {
	q := dbsqlc.New(tx)
	find := dbsqlc.InboxMessagesStrandedParams{Before: ib.clock().Add(-RescueAfter), Max: maxRescue}
	locked, err := q.InboxMessagesStranded(ctx, find)
	if err != nil {
		return nil, fmt.Errorf("inbox: rescue: find stranded messages: %w", err)
	}
	if len(locked) == 0 {
		return nil, nil
	}
	// Asked again, now that they are locked: a message given a job after
	// the first statement began came back from it as stranded, its job
	// unseen (see InboxMessagesStranded).
	for i := range locked {
		find.Ids = append(find.Ids, locked[i].WharfInboxMessage.ID.String())
	}
	rows, err := q.InboxMessagesStranded(ctx, find)
	if err != nil {
		return nil, fmt.Errorf("inbox: rescue: check stranded messages: %w", err)
	}
	settled := make([]stranded, len(rows))
	var inserts []river.InsertManyParams
	for i := range rows {
		s := &settled[i]
		s.msg, s.jobState = &rows[i].WharfInboxMessage, rows[i].JobState
		switch s.jobState {
		case "", "completed":
			inserts = append(inserts, river.InsertManyParams{
				Args: inboxjob.ProcessArgs{MessageID: s.msg.ID, ReceivedAt: s.msg.ReceivedAt}, InsertOpts: ib.jobs.Opts(),
			})
			continue
		case "gone":
			s.cause = fmt.Errorf("dead: its River job %d is gone (deleted outside Wharf?) and it was never processed; replay it to run it", inboxjob.JobID(s.msg))
		default:
			s.cause = fmt.Errorf("dead: its River job %d was %s without a recorded result (the process died in its handler?); replay it to run it", inboxjob.JobID(s.msg), s.jobState)
		}
		dead, err := q.InboxMessageSkip(ctx, dbsqlc.InboxMessageSkipParams{
			Reason: s.cause.Error(), Now: ib.clock(), ReceivedAt: s.msg.ReceivedAt, ID: s.msg.ID,
		})
		if err != nil {
			return nil, fmt.Errorf("inbox: rescue: mark message %s dead: %w", s.msg.ID, err)
		}
		s.msg = &dead
		if err := ib.ordering.WakeNext(ctx, tx, s.msg); err != nil {
			return nil, err
		}
	}
	if len(inserts) == 0 {
		return settled, nil
	}
	jobs, err := ib.jobs.Assign(ctx, tx, inserts)
	if err != nil {
		return nil, fmt.Errorf("inbox: rescue: %w", err)
	}
	for i := range settled {
		settled[i].jobID = jobs[settled[i].msg.ID]
	}
	return settled, nil
}

// reportRescued logs what Rescue settled and calls Config.OnDead for the
// messages it made dead.
func (ib *Inbox) reportRescued(ctx context.Context, settled []stranded) {
	for _, s := range settled {
		if s.cause == nil {
			ib.logger.WarnContext(ctx, "inbox: rescued a message that nothing would have run; it runs on a new job",
				"message_id", s.msg.ID, "source", s.msg.Source, "event_id", s.msg.EventID, "job_id", s.jobID, "old_job_state", cmp.Or(s.jobState, "none (parked)"))
			continue
		}
		ib.logger.WarnContext(ctx, "inbox: a message whose River job ended without a recorded result is dead",
			"message_id", s.msg.ID, "source", s.msg.Source, "event_id", s.msg.EventID, "error", s.cause)
		ib.dead(ctx, s.msg, s.cause)
	}
}
