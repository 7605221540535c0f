// Package operator carries out what an operator asks of a stored message
// beside its jobs: replay it, skip it (dead-letter it so that the later
// messages of its ordering key go on), or erase it. Each locks the message
// and acts only on what it then reads, and deletes a job of the message's
// that will not be needed (see inboxjob.Jobs.Delete): a worker running
// meanwhile finds the message no longer its own and leaves it. Package
// inbox's Replay, Skip and Forget (and their Tx forms) call it.
package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/wharfhq/wharf/internal/audit"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/ordering"
	"github.com/wharfhq/wharf/internal/partition"
	"github.com/wharfhq/wharf/internal/shared"
)

// The errors of the actions, exported by package inbox under the same
// identity (inbox.ErrNotFound, inbox.ErrNotReplayable,
// inbox.ErrNotSkippable).
var (
	ErrNotFound      = errors.New("inbox: message not found")
	ErrNotReplayable = errors.New("inbox: message cannot be replayed")
	ErrNotSkippable  = errors.New("inbox: message is finished; nothing to skip")
)

// notFound maps pgx.ErrNoRows to ErrNotFound.
func notFound(err error) error { return shared.NotFound(err, ErrNotFound) }

// Config configures Actions. Every field is required.
type Config struct {
	// River is the inbox's insert-only client: it looks up, inserts and
	// deletes jobs.
	River *river.Client[pgx.Tx]
	// Jobs deletes the jobs no message needs.
	Jobs *inboxjob.Jobs
	// Ordering wakes the next message of a key whose message was skipped
	// or erased.
	Ordering *ordering.Ordering
	// Logger receives a line per replay.
	Logger *slog.Logger
	// Now returns the current time at Postgres's precision.
	Now func() time.Time
}

// errInvalidConfig wraps each problem New finds with its config.
var errInvalidConfig = errors.New("operator: invalid config")

func (c *Config) validate() error {
	p := shared.NewProblems(errInvalidConfig)
	if c.River == nil {
		p.Addf("no River client")
	}
	if c.Jobs == nil {
		p.Addf("no Jobs")
	}
	if c.Ordering == nil {
		p.Addf("no Ordering")
	}
	if c.Logger == nil {
		p.Addf("no Logger")
	}
	if c.Now == nil {
		p.Addf("no Now")
	}
	return p.Err()
}

// Actions are an operator's actions on stored messages.
type Actions struct {
	config Config
}

// New returns Actions for cfg, or an error naming what cfg lacks.
func New(cfg *Config) (*Actions, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Actions{config: *cfg}, nil
}

// ReplayTx re-enqueues message id in tx (see inbox.ReplayTx).
func (a *Actions) ReplayTx(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	q := dbsqlc.New(tx)
	row, err := lockRevivable(ctx, q, id)
	if err != nil {
		return err
	}
	oldJob, err := a.replayable(ctx, tx, &row)
	if err != nil {
		return err
	}
	if err := a.requeue(ctx, tx, q, &row, oldJob); err != nil {
		return err
	}
	return a.record(ctx, tx, "message.replay", row.ID.String(), "", map[string]any{"source": row.Source, "event_id": row.EventID})
}

// record writes the audit log's entry of an action on a message.
func (a *Actions) record(ctx context.Context, tx pgx.Tx, action, objectID, reason string, details map[string]any) error {
	return audit.Write(ctx, tx, a.config.Now(), audit.Record{
		Action: action, ObjectType: "message", ObjectID: objectID, Reason: reason, Details: details,
	})
}

// lockRevivable locks message id for a replay, which revives an old row:
// it keeps retention from dropping the row's partition until the
// transaction ends. An erased message, or one whose day retention is
// dropping, is not replayable.
func lockRevivable(ctx context.Context, q *dbsqlc.Queries, id uuid.UUID) (dbsqlc.WharfInboxMessage, error) {
	if err := q.AdvisoryXactLockShared(ctx, dbsqlc.AdvisoryXactLockSharedParams{
		Class: partition.LockClass(),
		Key:   partition.RetentionLockKey(inboxjob.MessagesTable),
	}); err != nil {
		return dbsqlc.WharfInboxMessage{}, err
	}
	row, err := q.InboxMessageGetByIDForUpdate(ctx, id)
	if err != nil {
		return row, notFound(err)
	}
	if row.ScrubbedAt != nil {
		return row, fmt.Errorf("%w (message %s was erased)", ErrNotReplayable, id)
	}
	// Retention marks a day before it detaches its partition, under the
	// lock held shared above, and holds no lock while it detaches.
	dropping, err := q.PartitionDropMarked(ctx, dbsqlc.PartitionDropMarkedParams{
		Parent: inboxjob.MessagesTable, Day: partition.Day(row.ReceivedAt),
	})
	if err != nil {
		return row, err
	}
	if dropping {
		return row, fmt.Errorf("%w (message %s: retention is dropping its day)", ErrNotReplayable, id)
	}
	return row, nil
}

// replayable returns row's job, nil when River no longer has it, or an
// error wrapping ErrNotReplayable when the message is processed, or
// received and its job still to run.
func (a *Actions) replayable(ctx context.Context, tx pgx.Tx, row *dbsqlc.WharfInboxMessage) (*rivertype.JobRow, error) {
	var oldJob *rivertype.JobRow
	if row.JobID != nil {
		var err error
		oldJob, err = a.config.River.JobGetTx(ctx, tx, *row.JobID)
		if err != nil && !errors.Is(err, rivertype.ErrNotFound) {
			return nil, fmt.Errorf("inbox: look up job: %w", err)
		}
	}
	switch row.Status {
	case inboxjob.StatusFailed, inboxjob.StatusDead:
	case inboxjob.StatusReceived:
		if oldJob != nil && !inboxjob.Finalized(oldJob.State) {
			return nil, fmt.Errorf("%w (message %s is received and its job %d is %s)", ErrNotReplayable, row.ID, oldJob.ID, oldJob.State)
		}
	default:
		return nil, fmt.Errorf("%w (message %s is %s)", ErrNotReplayable, row.ID, row.Status)
	}
	return oldJob, nil
}

// requeue gives row a new job in place of oldJob (if any), on oldJob's
// queue, with a fresh set of attempts, and returns it to received.
func (a *Actions) requeue(ctx context.Context, tx pgx.Tx, q *dbsqlc.Queries, row *dbsqlc.WharfInboxMessage, oldJob *rivertype.JobRow) error {
	opts := a.config.Jobs.Opts()
	if oldJob != nil {
		// The old job may wait for a retry; the new one replaces it. A
		// running job cannot be deleted and needs not be: it finds the
		// message on another job and leaves it, nor does its failure
		// record apply (see inboxjob.OwnedBy, InboxMessageMarkFailed).
		if err := a.config.Jobs.Delete(ctx, tx, oldJob); err != nil {
			return err
		}
		// Stay on the queue the application works, whatever this Inbox
		// (the CLI's, say) was configured with.
		opts.Queue = oldJob.Queue
	}
	job, err := a.config.River.InsertTx(ctx, tx, inboxjob.ProcessArgs{MessageID: row.ID, ReceivedAt: row.ReceivedAt}, opts)
	if err != nil {
		return fmt.Errorf("inbox: insert job: %w", err)
	}
	if _, err := q.InboxMessageRequeue(ctx, dbsqlc.InboxMessageRequeueParams{
		JobID:      job.Job.ID,
		Now:        a.config.Now(),
		ReceivedAt: row.ReceivedAt,
		ID:         row.ID,
	}); err != nil {
		return notFound(err)
	}
	a.config.Logger.InfoContext(ctx, "inbox: message replayed", "message_id", row.ID, "source", row.Source, "event_id", row.EventID,
		"job_id", job.Job.ID, "queue", opts.Queue)
	return nil
}

// SkipTx dead-letters message id in tx with reason (see inbox.SkipTx).
func (a *Actions) SkipTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, reason string) error {
	q := dbsqlc.New(tx)
	row, err := q.InboxMessageGetByIDForUpdate(ctx, id)
	if err != nil {
		return notFound(err)
	}
	text := inboxjob.LastError("skipped by an operator: " + reason)
	skipped, err := q.InboxMessageSkip(ctx, dbsqlc.InboxMessageSkipParams{
		Reason: text, Now: a.config.Now(), ReceivedAt: row.ReceivedAt, ID: row.ID,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("inbox: skip message %s (%s): %w", id, row.Status, ErrNotSkippable)
	}
	if err != nil {
		return fmt.Errorf("inbox: skip message %s: %w", id, err)
	}
	if err := a.config.Ordering.WakeNext(ctx, tx, &skipped); err != nil {
		return err
	}
	if skipped.JobID != nil {
		job, err := a.config.River.JobGetTx(ctx, tx, *skipped.JobID)
		switch {
		case errors.Is(err, rivertype.ErrNotFound):
		case err != nil:
			return fmt.Errorf("inbox: skip message %s: look up job: %w", id, err)
		default:
			if err := a.config.Jobs.Delete(ctx, tx, job); err != nil {
				return err
			}
		}
	}
	return a.record(ctx, tx, "message.skip", row.ID.String(), reason, map[string]any{"source": row.Source, "event_id": row.EventID})
}

// ForgetTx erases the messages of event (source, eventID) in tx (see
// inbox.ForgetTx).
func (a *Actions) ForgetTx(ctx context.Context, tx pgx.Tx, source, eventID string) (int, error) {
	q := dbsqlc.New(tx)
	if _, err := q.InboxKeyTombstone(ctx, dbsqlc.InboxKeyTombstoneParams{
		Now: a.config.Now(), Source: source, EventID: eventID,
	}); err != nil {
		return 0, err
	}
	rows, err := q.InboxMessageForget(ctx, dbsqlc.InboxMessageForgetParams{
		Now: a.config.Now(), Source: source, EventID: eventID,
	})
	if err != nil {
		return 0, err
	}
	if len(rows) == 0 {
		return 0, ErrNotFound
	}
	for _, row := range rows {
		// A later message of its ordering key parked behind it goes on.
		if err := a.config.Ordering.WakeNext(ctx, tx, &dbsqlc.WharfInboxMessage{ID: row.ID, Source: source, ReceivedAt: row.ReceivedAt, OrderingKey: row.OrderingKey}); err != nil {
			return 0, err
		}
		if row.JobID == nil {
			continue
		}
		// A job still waiting would only find the message erased.
		job, err := a.config.River.JobGetTx(ctx, tx, *row.JobID)
		if errors.Is(err, rivertype.ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("inbox: look up job: %w", err)
		}
		if err := a.config.Jobs.Delete(ctx, tx, job); err != nil {
			return 0, err
		}
	}
	err = a.record(ctx, tx, "message.forget", eventID, "", map[string]any{"source": source, "messages": len(rows)})
	return len(rows), err
}
