package process

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

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

// adoptionLostError is the loss of a transaction in which the job
// adopted messages: whatever lost it (an adopted handler that broke or
// ended the transaction, a deferred constraint failing at the commit, the
// job's context running out), the job's own message is not to blame, so
// the job runs again alone (see single.settle). committed reports that an
// adopted handler committed the transaction itself (through tx.Conn()):
// the own message and the adopted ones before it are processed.
type adoptionLostError struct {
	err       error
	committed bool
}

func (e *adoptionLostError) Error() string {
	return "inbox: a transaction with adopted messages was lost: " + e.err.Error()
}

func (e *adoptionLostError) Unwrap() error { return e.err }

// suspects are the jobs adopted in transactions that were lost, which a
// node adopts no more for suspectTTL: one of them may be what lost it (a
// deferred constraint, say), and it then goes on its own job, where a
// failure is its own. At most maxSuspects are kept.
type suspects struct {
	mu   sync.Mutex
	jobs map[int64]time.Time // until when
}

const (
	suspectTTL  = 10 * time.Minute
	maxSuspects = 4096
)

func (s *suspects) add(ids []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.jobs == nil || len(s.jobs)+len(ids) > maxSuspects {
		maps.DeleteFunc(s.jobs, func(_ int64, until time.Time) bool { return now.After(until) })
		if s.jobs == nil || len(s.jobs)+len(ids) > maxSuspects {
			s.jobs = map[int64]time.Time{}
		}
	}
	for _, id := range ids {
		s.jobs[id] = now.Add(suspectTTL)
	}
}

func (s *suspects) list() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	ids := make([]int64, 0, len(s.jobs))
	for id, until := range s.jobs {
		if now.Before(until) {
			ids = append(ids, id)
		}
	}
	return ids
}

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
		Skip: r.p.suspects.list(),
	})
	if err != nil {
		return fmt.Errorf("inbox: adopt waiting messages: %w", err)
	}
	if len(rows) == 0 {
		return nil
	}
	// From here on the transaction holds other messages' work: whatever
	// loses it is not the own message's failure.
	r.adoptedJobs = make([]int64, len(rows))
	for i := range rows {
		r.adoptedJobs[i] = inboxjob.JobID(&rows[i])
	}
	// Its own lines: the job's carry the own message's id.
	log := r.p.config.Logger.With("adopted_by_job_id", r.job.ID)
	b := &batch{p: r.p, log: log, pastHalf: r.pastHalf, took: map[uuid.UUID]time.Duration{},
		tx: tx, q: q, rows: rows, now: r.p.config.Now(), order: &ordering.BatchOrder{}, sp: &savepoints{ctx: ctx}}
	var settled []int64
	for i := range b.rows {
		if b.pastHalf() {
			break // the rest run on their own jobs
		}
		msg := &b.rows[i]
		if err := b.alone(ctx, msg); err != nil {
			lost := &adoptionLostError{err: err, committed: b.selfCommitted}
			if lost.committed {
				r.adopted = b // reported with reportSelfCommitted
			}
			return lost
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

// settleAdoption settles a transaction lost after the job adopted
// messages (err): it runs again at once, alone, using no attempt, and this
// node adopts none of those messages' jobs for a while (see suspects). If
// an adopted handler committed the transaction itself, what committed is
// reported.
func (r *single) settleAdoption(ctx context.Context, err error) error {
	r.p.suspects.add(r.adoptedJobs)
	var lost *adoptionLostError
	if errors.As(err, &lost) && lost.committed {
		r.log.WarnContext(ctx, "inbox: an adopted message's handler committed the transaction itself; what ran before it is processed, the rest run on their own jobs",
			"error", err)
		r.report(ctx)
		r.adopted.reportSelfCommitted(ctx)
	} else {
		r.log.WarnContext(ctx, "inbox: the transaction lost after adopting messages rolled back; the job runs again alone",
			"error", err)
	}
	return river.JobSnooze(0)
}
