package inboxjob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/pgxtx"
	"github.com/wharfhq/wharf/internal/shared"
)

// Config configures Jobs. Every field is required: package inbox applies
// its Config's defaults before it builds the engines.
type Config struct {
	// River is the inbox's insert-only client.
	River *river.Client[pgx.Tx]
	// Queue is the queue new jobs go to (Config.Queue).
	Queue string
	// MaxAttempts is a message job's attempts (Config.MaxAttempts).
	MaxAttempts int
	// Now returns the current time at Postgres's precision.
	Now func() time.Time
}

// errInvalidConfig wraps each problem New finds with its config.
var errInvalidConfig = errors.New("inboxjob: invalid config")

func (c *Config) validate() error {
	p := shared.NewProblems(errInvalidConfig)
	if c.River == nil {
		p.Addf("no River client")
	}
	if c.Queue == "" {
		p.Addf("no Queue")
	}
	if c.MaxAttempts < 1 {
		p.Addf("MaxAttempts %d is below 1", c.MaxAttempts)
	}
	if c.Now == nil {
		p.Addf("no Now")
	}
	return p.Err()
}

// Jobs inserts and deletes the River jobs of the inbox's messages.
type Jobs struct {
	config Config
}

// New returns Jobs for cfg, or an error naming what cfg lacks.
func New(cfg *Config) (*Jobs, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Jobs{config: *cfg}, nil
}

// MaxAttempts is a message job's attempts.
func (j *Jobs) MaxAttempts() int { return j.config.MaxAttempts }

// Opts are the insert options of a message's own job.
func (j *Jobs) Opts() *river.InsertOpts {
	return &river.InsertOpts{Queue: j.config.Queue, MaxAttempts: j.config.MaxAttempts}
}

// BatchOpts are the insert options of a batch job.
func (j *Jobs) BatchOpts() *river.InsertOpts {
	return &river.InsertOpts{Queue: j.config.Queue, MaxAttempts: batchMaxAttempts}
}

// One is the insert of a job of its own for message id, received at;
// unordered when the message has no ordering key.
func (j *Jobs) One(id uuid.UUID, at time.Time, unordered bool) river.InsertManyParams {
	return river.InsertManyParams{Args: ProcessArgs{MessageID: id, ReceivedAt: at, Unordered: unordered}, InsertOpts: j.Opts()}
}

// Batch is the insert of one batch job for messages ids, received at;
// unordered when none of them has an ordering key.
func (j *Jobs) Batch(at time.Time, ids []uuid.UUID, unordered bool) river.InsertManyParams {
	return river.InsertManyParams{Args: BatchArgs{ReceivedAt: at, MessageIDs: ids, Unordered: unordered}, InsertOpts: j.BatchOpts()}
}

// Insert inserts processing jobs, in tx, for messages about to be stored
// (the caller writes each message with its job), and returns each
// message's job.
func (j *Jobs) Insert(ctx context.Context, tx pgx.Tx, inserts []river.InsertManyParams) (map[uuid.UUID]int64, error) {
	jobs, _, err := j.insert(ctx, tx, inserts)
	return jobs, err
}

// Assign inserts processing jobs for stored messages and hands each of
// those messages to its job, in tx; it returns each message's job.
func (j *Jobs) Assign(ctx context.Context, tx pgx.Tx, inserts []river.InsertManyParams) (map[uuid.UUID]int64, error) {
	jobs, byReceivedAt, err := j.insert(ctx, tx, inserts)
	if err != nil {
		return nil, err
	}
	q := dbsqlc.New(tx)
	for at, ids := range byReceivedAt {
		set := dbsqlc.InboxMessagesSetJobParams{Now: j.config.Now(), ReceivedAt: at, Ids: pgxtx.UUIDTexts(ids), JobIds: make([]int64, len(ids))}
		for i, id := range ids {
			set.JobIds[i] = jobs[id]
		}
		if err := q.InboxMessagesSetJob(ctx, set); err != nil {
			return nil, fmt.Errorf("inbox: hand messages to their jobs: %w", err)
		}
	}
	return jobs, nil
}

func (j *Jobs) insert(ctx context.Context, tx pgx.Tx, inserts []river.InsertManyParams) (map[uuid.UUID]int64, map[time.Time][]uuid.UUID, error) {
	inserted, err := j.config.River.InsertManyTx(ctx, tx, inserts)
	if err != nil {
		return nil, nil, fmt.Errorf("inbox: insert jobs: %w", err)
	}
	return jobOfMessage(inserted)
}

// jobOfMessage maps each message of inserted processing jobs (ProcessArgs
// or BatchArgs) to its job's id, read from each job's args: River does not
// promise that InsertManyTx returns its results in the order of its
// params. It also returns the messages by their receipt time.
func jobOfMessage(inserted []*rivertype.JobInsertResult) (map[uuid.UUID]int64, map[time.Time][]uuid.UUID, error) {
	jobs := make(map[uuid.UUID]int64, len(inserted))
	byReceivedAt := map[time.Time][]uuid.UUID{}
	for _, res := range inserted {
		var args BatchArgs
		switch res.Job.Kind {
		case ProcessArgs{}.Kind():
			var one ProcessArgs
			if err := json.Unmarshal(res.Job.EncodedArgs, &one); err != nil {
				return nil, nil, fmt.Errorf("inbox: args of job %d: %w", res.Job.ID, err)
			}
			args = BatchArgs{ReceivedAt: one.ReceivedAt, MessageIDs: []uuid.UUID{one.MessageID}}
		case BatchArgs{}.Kind():
			if err := json.Unmarshal(res.Job.EncodedArgs, &args); err != nil {
				return nil, nil, fmt.Errorf("inbox: args of job %d: %w", res.Job.ID, err)
			}
		default:
			return nil, nil, fmt.Errorf("inbox: job %d has kind %q, not an inbox job", res.Job.ID, res.Job.Kind)
		}
		for _, id := range args.MessageIDs {
			jobs[id] = res.Job.ID
		}
		byReceivedAt[args.ReceivedAt] = append(byReceivedAt[args.ReceivedAt], args.MessageIDs...)
	}
	return jobs, byReceivedAt, nil
}

// Delete deletes a message's job that will not be needed, unless it is
// running (it finds the message no longer its own and leaves it) or is a
// batch's that another message still waits for (its worker skips a message
// that moved on).
func (j *Jobs) Delete(ctx context.Context, tx pgx.Tx, job *rivertype.JobRow) error {
	if job.Kind == (BatchArgs{}).Kind() {
		if Finalized(job.State) {
			return nil // it will not run again; keep its record
		}
		var args BatchArgs
		if err := json.Unmarshal(job.EncodedArgs, &args); err != nil {
			return fmt.Errorf("inbox: job %d: decode args: %w", job.ID, err)
		}
		// Not locked: locking the neighbours' rows too would deadlock two
		// replays of one batch. Messages only ever leave a batch job, so a
		// stale read at worst keeps a job that has nothing left to do.
		rows, err := dbsqlc.New(tx).InboxMessagesGet(ctx, dbsqlc.InboxMessagesGetParams{
			ReceivedAt: args.ReceivedAt, Ids: pgxtx.UUIDTexts(args.MessageIDs),
		})
		if err != nil {
			return fmt.Errorf("inbox: messages of job %d: %w", job.ID, err)
		}
		for i := range rows {
			if OwnedBy(&rows[i], job.ID) {
				return nil
			}
		}
	}
	if _, err := j.config.River.JobDeleteTx(ctx, tx, job.ID); err != nil &&
		!errors.Is(err, rivertype.ErrNotFound) && !errors.Is(err, rivertype.ErrJobRunning) {
		return fmt.Errorf("inbox: delete job %d: %w", job.ID, err)
	}
	return nil
}

// Finalized reports whether a job in state s will never run again.
func Finalized(s rivertype.JobState) bool {
	return s == rivertype.JobStateCompleted || s == rivertype.JobStateCancelled || s == rivertype.JobStateDiscarded
}
