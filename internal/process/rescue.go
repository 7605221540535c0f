package process

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/ordering"
	"github.com/wharfhq/wharf/internal/shared"
)

// RescuerConfig configures a Rescuer. Every field but OnDead is required:
// package inbox gives its own values (RescueAfter, RescueInterval).
type RescuerConfig struct {
	// Pool runs Rescue's transaction.
	Pool *pgxpool.Pool
	// Jobs inserts the jobs of rescued messages.
	Jobs *inboxjob.Jobs
	// Ordering wakes the next message of a key whose message it made dead.
	Ordering *ordering.Ordering
	// Logger receives a warning per message settled.
	Logger *slog.Logger
	// Now returns the current time at Postgres's precision.
	Now func() time.Time
	// OnDead, if set, is told of each message a rescue made dead.
	OnDead OnDead
	// After is how long a message must have been left unchanged before a
	// rescue treats it as stranded.
	After time.Duration
	// Interval is how often the periodic rescue runs: its job's timeout.
	Interval time.Duration
}

func (c *RescuerConfig) validate() error {
	p := shared.NewProblems(errInvalidConfig)
	if c.Pool == nil {
		p.Addf("rescuer: no Pool")
	}
	if c.Jobs == nil {
		p.Addf("rescuer: no Jobs")
	}
	if c.Ordering == nil {
		p.Addf("rescuer: no Ordering")
	}
	if c.Logger == nil {
		p.Addf("rescuer: no Logger")
	}
	if c.Now == nil {
		p.Addf("rescuer: no Now")
	}
	if c.After <= 0 {
		p.Addf("rescuer: After %s is not positive", c.After)
	}
	if c.Interval <= 0 {
		p.Addf("rescuer: Interval %s is not positive", c.Interval)
	}
	return p.Err()
}

// Rescuer settles the unfinished messages that nothing would run (see
// package inbox's Rescue): a parked message nothing woke, or one whose job
// completed without processing it, gets a new job; one whose job was
// discarded, cancelled or deleted becomes dead.
type Rescuer struct {
	config RescuerConfig
}

// NewRescuer returns a Rescuer for cfg, or an error naming what cfg lacks.
func NewRescuer(cfg *RescuerConfig) (*Rescuer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Rescuer{config: *cfg}, nil
}

// maxRescue bounds the messages one Rescue hands jobs to; the next run
// takes the rest.
const maxRescue = 1000

// Rescue settles the stranded messages in a transaction of its own and
// returns how many it settled.
func (r *Rescuer) Rescue(ctx context.Context) (int, error) {
	var settled []stranded
	err := pgx.BeginFunc(ctx, r.config.Pool, func(tx pgx.Tx) error {
		var err error
		settled, err = r.rescueTx(ctx, tx)
		return err
	})
	if err != nil {
		return 0, err
	}
	r.report(ctx, settled)
	return len(settled), nil
}

// RescueTx is Rescue in tx; OnDead is called before it returns, whether
// tx commits or not.
func (r *Rescuer) RescueTx(ctx context.Context, tx pgx.Tx) (int, error) {
	settled, err := r.rescueTx(ctx, tx)
	if err != nil {
		return 0, err
	}
	r.report(ctx, settled)
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

func (r *Rescuer) rescueTx(ctx context.Context, tx pgx.Tx) ([]stranded, error) {
	q := dbsqlc.New(tx)
	rows, err := r.find(ctx, q)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	settled := make([]stranded, len(rows))
	var inserts []river.InsertManyParams
	for i := range rows {
		s := &settled[i]
		s.msg, s.jobState = &rows[i].WharfInboxMessage, rows[i].JobState
		switch s.jobState {
		case "", "completed":
			inserts = append(inserts, r.config.Jobs.One(s.msg.ID, s.msg.ReceivedAt, s.msg.OrderingKey == ""))
			continue
		case "gone":
			s.cause = fmt.Errorf("dead: its River job %d is gone (deleted outside Wharf?) and it was never processed; replay it to run it", inboxjob.JobID(s.msg))
		default:
			s.cause = fmt.Errorf("dead: its River job %d was %s without a recorded result (the process died in its handler?); replay it to run it", inboxjob.JobID(s.msg), s.jobState)
		}
		if err := r.kill(ctx, tx, q, s); err != nil {
			return nil, err
		}
	}
	if len(inserts) == 0 {
		return settled, nil
	}
	jobs, err := r.config.Jobs.Assign(ctx, tx, inserts)
	if err != nil {
		return nil, fmt.Errorf("inbox: rescue: %w", err)
	}
	for i := range settled {
		settled[i].jobID = jobs[settled[i].msg.ID]
	}
	return settled, nil
}

// find locks and returns the stranded messages, with their jobs' states.
func (r *Rescuer) find(ctx context.Context, q *dbsqlc.Queries) ([]dbsqlc.InboxMessagesStrandedRow, error) {
	find := dbsqlc.InboxMessagesStrandedParams{Before: r.config.Now().Add(-r.config.After), Max: maxRescue}
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
	return rows, nil
}

// kill makes s's message dead with s.cause as its last error, and wakes
// the next message of its ordering key.
func (r *Rescuer) kill(ctx context.Context, tx pgx.Tx, q *dbsqlc.Queries, s *stranded) error {
	dead, err := q.InboxMessageSkip(ctx, dbsqlc.InboxMessageSkipParams{
		Reason: s.cause.Error(), Now: r.config.Now(), ReceivedAt: s.msg.ReceivedAt, ID: s.msg.ID,
	})
	if err != nil {
		return fmt.Errorf("inbox: rescue: mark message %s dead: %w", s.msg.ID, err)
	}
	s.msg = &dead
	return r.config.Ordering.WakeNext(ctx, tx, s.msg)
}

// report logs what Rescue settled and calls OnDead for the messages it
// made dead.
func (r *Rescuer) report(ctx context.Context, settled []stranded) {
	log := r.config.Logger
	for _, s := range settled {
		if s.cause == nil {
			log.WarnContext(ctx, "inbox: rescued a message that nothing would have run; it runs on a new job",
				"message_id", s.msg.ID, "source", s.msg.Source, "event_id", s.msg.EventID, "job_id", s.jobID, "old_job_state", cmp.Or(s.jobState, "none (parked)"))
			continue
		}
		log.WarnContext(ctx, "inbox: a message whose River job ended without a recorded result is dead",
			"message_id", s.msg.ID, "source", s.msg.Source, "event_id", s.msg.EventID, "error", s.cause)
		r.config.OnDead.call(ctx, log, s.msg, s.cause)
	}
}

// Worker returns the River worker of the periodic rescue job.
func (r *Rescuer) Worker() *RescueWorker { return &RescueWorker{r: r} }

// RescueWorker is the River worker of the inbox's periodic rescue.
type RescueWorker struct {
	river.WorkerDefaults[inboxjob.RescueArgs]
	r *Rescuer
}

// Timeout lets a rescue over a large backlog finish: it runs once per
// interval.
func (w *RescueWorker) Timeout(*river.Job[inboxjob.RescueArgs]) time.Duration {
	return w.r.config.Interval
}

// Work runs a rescue.
func (w *RescueWorker) Work(ctx context.Context, _ *river.Job[inboxjob.RescueArgs]) error {
	_, err := w.r.Rescue(ctx)
	return err
}
