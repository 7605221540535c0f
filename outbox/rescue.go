package outbox

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/delivery"
)

// RescueInterval is how often the outbox's periodic job (see PeriodicJobs)
// looks for stranded deliveries.
const RescueInterval = delivery.RescueInterval

// RescueAfter is how long a delivery must have been left unchanged, and
// overdue, before Rescue treats it as stranded: the transactions that give
// deliveries jobs commit in moments, and one a moment old may be in the
// middle of one.
const RescueAfter = delivery.RescueAfter

// PeriodicJobs returns the outbox's periodic jobs, for your River client's
// Config.PeriodicJobs (wharfriver.Configure adds them): every
// RescueInterval, and when the client starts, Rescue on the outbox's
// queue; every NoticeInterval, PublishNotices. Their workers are
// registered by AddWorkers.
func (o *Outbox) PeriodicJobs() []*river.PeriodicJob {
	return append(o.engine.PeriodicJobs(), o.noticePeriodicJob())
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
func (o *Outbox) Rescue(ctx context.Context) (int, error) { return o.engine.Rescue(ctx) }

// RescueTx is Rescue in tx; Config.OnDead is called before it returns,
// whether tx commits or not. After an error tx may be aborted: roll it
// back.
func (o *Outbox) RescueTx(ctx context.Context, tx pgx.Tx) (int, error) {
	return o.engine.RescueTx(ctx, tx)
}
