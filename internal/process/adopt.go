package process

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/ordering"
	"github.com/wharfhq/wharf/internal/pgxtx"
	"github.com/wharfhq/wharf/internal/shared"
)

// A message's own job adopts: once its own handler has run, and before its
// transaction commits, it takes on up to Config.Adopt messages whose own
// jobs wait in its queue (messages received one per transaction, with
// ReceiveTx, get a job each) and runs their handlers in the same
// transaction, each in a savepoint with its processed mark, as a batch job
// does. Their jobs are completed in that transaction; so one commit and one
// River fetch cover many messages when many are waiting, where each would
// otherwise pay its own.
//
// Only what a job's first run would do is adopted: a job never run, with no
// snooze or batch failure in its args, whose message still waits for it,
// never attempted and with no ordering key (an ordered message waits for
// its turn on its own job). The jobs are locked as River's fetch locks
// them, so that no fetch runs them while this transaction holds them; a job
// whose message the transaction does not process is left as it was and
// runs on its own once the transaction ends, as does every adopted job if
// the transaction rolls back.

// adoptionLostError is a failure of an adopted message's handler that
// lost the transaction (see batchFatalError): the own message's work is
// lost with it.
type adoptionLostError struct{ err error }

func (e *adoptionLostError) Error() string {
	return "inbox: an adopted message lost the transaction: " + e.err.Error()
}

func (e *adoptionLostError) Unwrap() error { return e.err }

// adopts reports whether the job adopts messages: a first run, never
// snoozed (a job whose transaction an adopted message lost runs again
// alone), in a transaction its own handler left open.
func (r *single) adopts(tx pgx.Tx) bool {
	return r.p.config.Adopt > 0 && r.job.Attempt == 1 && shared.SnoozeCount(r.job.Metadata) == 0 &&
		!r.pastHalf() && tx.Conn().PgConn().TxStatus() == 'T'
}

// adopt takes on waiting messages in tx, after the job's own message, and
// runs their handlers (see above). An error is one that lost the
// transaction.
func (r *single) adopt(ctx context.Context, tx pgx.Tx) error {
	if !r.adopts(tx) {
		return nil
	}
	q := dbsqlc.New(pgxtx.GenericPlans{DBTX: tx})
	rows, err := q.InboxMessagesAdopt(ctx, dbsqlc.InboxMessagesAdoptParams{
		Queue: r.job.Queue, Kind: inboxjob.ProcessArgs{}.Kind(), Max: int32(r.p.config.Adopt),
	})
	if err != nil {
		return fmt.Errorf("inbox: adopt waiting messages: %w", err)
	}
	if len(rows) == 0 {
		return nil
	}
	b := &batch{p: r.p, log: r.log, pastHalf: r.pastHalf, took: map[uuid.UUID]time.Duration{},
		tx: tx, q: q, rows: rows, now: r.p.config.Now(), order: &ordering.BatchOrder{}, sp: &savepoints{ctx: ctx}}
	var settled []int64
	for i := range b.rows {
		if b.pastHalf() {
			break // the rest run on their own jobs
		}
		msg := &b.rows[i]
		if err := b.alone(ctx, msg); err != nil {
			return &adoptionLostError{err}
		}
		settled = append(settled, inboxjob.JobID(msg))
	}
	for _, f := range b.failures {
		if err := r.p.retryAlone(ctx, tx, f.msg, f.cause); err != nil {
			return err
		}
	}
	finish := dbsqlc.InboxMessagesAdoptedFinishParams{Now: b.now, JobIds: settled}
	for _, m := range b.processed {
		if !slices.Contains(b.unmarked, m.ID) {
			continue
		}
		finish.ReceivedAts = append(finish.ReceivedAts, m.ReceivedAt)
		finish.Ids = append(finish.Ids, m.ID.String())
	}
	if err := q.InboxMessagesAdoptedFinish(ctx, finish); err != nil {
		return fmt.Errorf("inbox: complete adopted messages: %w", err)
	}
	r.adopted = b
	return nil
}

// isAdoptionLost reports whether err is an adopted message's loss of the
// job's transaction.
func isAdoptionLost(err error) bool {
	var lost *adoptionLostError
	return errors.As(err, &lost)
}
