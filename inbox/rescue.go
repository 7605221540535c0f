package inbox

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

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
	return ib.rescuer.Rescue(ctx)
}

// RescueTx is Rescue in tx; Config.OnDead is called before it returns,
// whether tx commits or not.
func (ib *Inbox) RescueTx(ctx context.Context, tx pgx.Tx) (int, error) {
	return ib.rescuer.RescueTx(ctx, tx)
}
