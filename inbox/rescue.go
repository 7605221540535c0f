package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/dbsqlc"
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

// rescueArgs are the args of the inbox's periodic rescue job.
type rescueArgs struct{}

// Kind is the River job kind of the inbox's periodic rescue.
func (rescueArgs) Kind() string { return "wharf_inbox_rescue" }

type rescueWorker struct {
	river.WorkerDefaults[rescueArgs]
	ib *Inbox
}

func (w *rescueWorker) Work(ctx context.Context, _ *river.Job[rescueArgs]) error {
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
			return rescueArgs{}, &river.InsertOpts{Queue: ib.queue}
		},
		&river.PeriodicJobOpts{ID: rescueArgs{}.Kind(), RunOnStart: true})}
}

// Rescue gives a job to every unfinished message that nothing would run
// otherwise (RescueAfter or more since it last changed), and returns how
// many it rescued: a message parked behind an earlier one of its ordering
// key when that one has finished without waking it, and a message whose
// River job has finished (completed, cancelled, discarded) or been deleted
// while the message was still to process or failing. Neither happens in
// normal operation; a crash between two transactions, a failure to record
// a handler's failure, or a job cancelled or deleted through River rather
// than Skip or Forget can leave one. Each rescued message is logged. The
// periodic job of PeriodicJobs calls it; an operator can too.
func (ib *Inbox) Rescue(ctx context.Context) (int, error) {
	var n int
	err := ib.txFunc(ctx, func(tx pgx.Tx) error {
		var err error
		n, err = ib.RescueTx(ctx, tx)
		return err
	})
	return n, err
}

// RescueTx is Rescue in tx.
func (ib *Inbox) RescueTx(ctx context.Context, tx pgx.Tx) (int, error) {
	q := dbsqlc.New(tx)
	stranded, err := q.InboxMessagesStranded(ctx, dbsqlc.InboxMessagesStrandedParams{
		Before: ib.clock().Add(-RescueAfter), Max: maxRescue,
	})
	if err != nil {
		return 0, fmt.Errorf("inbox: rescue: find stranded messages: %w", err)
	}
	if len(stranded) == 0 {
		return 0, nil
	}
	inserts := make([]river.InsertManyParams, len(stranded))
	byReceivedAt := map[time.Time][]uuid.UUID{}
	for i, s := range stranded {
		inserts[i] = river.InsertManyParams{Args: processArgs{MessageID: s.ID, ReceivedAt: s.ReceivedAt}, InsertOpts: ib.insertOpts()}
		byReceivedAt[s.ReceivedAt] = append(byReceivedAt[s.ReceivedAt], s.ID)
	}
	inserted, err := ib.river.InsertManyTx(ctx, tx, inserts)
	if err != nil {
		return 0, fmt.Errorf("inbox: rescue: insert jobs: %w", err)
	}
	jobs, err := jobOfMessage(inserted)
	if err != nil {
		return 0, fmt.Errorf("inbox: rescue: %w", err)
	}
	for at, ids := range byReceivedAt {
		set, err := setJobParams(ib.clock(), at, ids, jobs)
		if err == nil {
			err = q.InboxMessagesSetJob(ctx, set)
		}
		if err != nil {
			return 0, fmt.Errorf("inbox: rescue: %w", err)
		}
	}
	for _, s := range stranded {
		ib.logger.WarnContext(ctx, "inbox: rescued a message that nothing would have run; it runs again on a new job",
			"message_id", s.ID, "job_id", jobs[s.ID])
	}
	return len(stranded), nil
}
