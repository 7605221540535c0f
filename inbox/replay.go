package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/partition"
)

var (
	// ErrNotFound is returned for a message id that does not exist (never
	// received, or dropped by retention).
	ErrNotFound = errors.New("inbox: message not found")
	// ErrNotReplayable is returned by Replay for a message that is neither
	// failed nor dead.
	ErrNotReplayable = errors.New("inbox: only failed or dead messages can be replayed")
)

// Get returns the stored message with id, or an error where
// errors.Is(err, ErrNotFound) is true.
func (ib *Inbox) Get(ctx context.Context, id uuid.UUID) (*Message, error) {
	row, err := dbsqlc.New(ib.pool).InboxMessageGet(ctx, id)
	if err != nil {
		return nil, translate(err)
	}
	return messageFromRow(&row), nil
}

// Replay re-enqueues a failed or dead message, in its own transaction. See
// ReplayTx.
func (ib *Inbox) Replay(ctx context.Context, id uuid.UUID) error {
	return ib.txFunc(ctx, func(tx pgx.Tx) error { return ib.ReplayTx(ctx, tx, id) })
}

// ReplayTx re-enqueues a failed or dead message in tx: its status returns to
// received and a new River job runs its handler with a fresh set of attempts.
// A pending retry of the old job is deleted. It returns an error where
// errors.Is(err, ErrNotFound) or errors.Is(err, ErrNotReplayable) is true when
// the message is missing or in another status; nothing changes then.
func (ib *Inbox) ReplayTx(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	// Revives an old row: keep retention from dropping its partition until
	// this transaction ends.
	if err := dbsqlc.New(tx).AdvisoryXactLockShared(ctx, dbsqlc.AdvisoryXactLockSharedParams{
		Class: partition.LockClass(),
		Key:   partition.RetentionLockKey(messagesTable),
	}); err != nil {
		return err
	}
	found, err := dbsqlc.New(tx).InboxMessageGet(ctx, id)
	if err != nil {
		return translate(err)
	}
	row, err := dbsqlc.New(tx).InboxMessageGetForUpdate(ctx, dbsqlc.InboxMessageGetForUpdateParams{
		ReceivedAt: found.ReceivedAt,
		ID:         id,
	})
	if err != nil {
		return translate(err)
	}
	if Status(row.Status) != StatusFailed && Status(row.Status) != StatusDead {
		return fmt.Errorf("%w (message %s is %s)", ErrNotReplayable, id, row.Status)
	}
	if row.JobID != nil {
		// The old job may wait for a retry; the new one replaces it. A
		// running job cannot be deleted and needs not be: whichever job
		// locks the message second finds it processed and does nothing.
		if _, err := ib.river.JobDeleteTx(ctx, tx, *row.JobID); err != nil &&
			!errors.Is(err, rivertype.ErrNotFound) && !errors.Is(err, rivertype.ErrJobRunning) {
			return fmt.Errorf("inbox: delete old job: %w", err)
		}
	}
	job, err := ib.river.InsertTx(ctx, tx, processArgs{MessageID: id, ReceivedAt: row.ReceivedAt}, ib.insertOpts())
	if err != nil {
		return fmt.Errorf("inbox: insert job: %w", err)
	}
	if _, err := dbsqlc.New(tx).InboxMessageRequeue(ctx, dbsqlc.InboxMessageRequeueParams{
		JobID:      job.Job.ID,
		Now:        ib.clock(),
		ReceivedAt: row.ReceivedAt,
		ID:         id,
	}); err != nil {
		return translate(err)
	}
	ib.logger.InfoContext(ctx, "inbox: message replayed", "message_id", id, "source", row.Source, "event_id", row.EventID, "job_id", job.Job.ID)
	return nil
}

// Forget erases the body and headers of every stored delivery of the event
// (source, eventID), for erasure requests, and returns how many messages it
// erased. Metadata stays (ids, type, status, times), and so does the dedupe
// key: a redelivery is still a duplicate and does not store the data again.
// A message not yet processed is marked dead, since it can no longer be
// processed. It returns an error where errors.Is(err, ErrNotFound) is true
// when no message has that event id.
func (ib *Inbox) Forget(ctx context.Context, source, eventID string) (int, error) {
	ids, err := dbsqlc.New(ib.pool).InboxMessageForget(ctx, dbsqlc.InboxMessageForgetParams{
		Now: ib.clock(), Source: source, EventID: eventID,
	})
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, ErrNotFound
	}
	ib.logger.InfoContext(ctx, "inbox: event erased on request", "source", source, "event_id", eventID, "messages", len(ids))
	return len(ids), nil
}

// translate maps database errors to the package's sentinels.
func translate(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// ListParams filters List. The zero value lists the newest messages.
type ListParams struct {
	// Source keeps only messages from this source. Defaults to all.
	Source string
	// Status keeps only messages in this status. Defaults to all.
	Status Status
	// Limit caps the number of messages. Defaults to 100; at most 10000.
	Limit int
}

// List returns stored messages, newest first.
func (ib *Inbox) List(ctx context.Context, params *ListParams) ([]*Message, error) {
	if params == nil {
		params = &ListParams{}
	}
	limit := params.Limit
	switch {
	case limit <= 0:
		limit = 100
	case limit > 10000:
		return nil, fmt.Errorf("inbox: list limit %d is over 10000", limit)
	}
	var source, status *string
	if params.Source != "" {
		source = &params.Source
	}
	if params.Status != "" {
		s := string(params.Status)
		status = &s
	}
	rows, err := dbsqlc.New(ib.pool).InboxMessageList(ctx, dbsqlc.InboxMessageListParams{
		Source:  source,
		Status:  status,
		MaxRows: int32(limit),
	})
	if err != nil {
		return nil, err
	}
	out := make([]*Message, len(rows))
	for i := range rows {
		out[i] = messageFromRow(&rows[i])
	}
	return out, nil
}
