package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/operator"
	"github.com/wharfhq/wharf/internal/shared"
)

var (
	// ErrNotFound is returned for a message id that does not exist (never
	// received, or dropped by retention).
	ErrNotFound = operator.ErrNotFound
	// ErrNotReplayable is returned by Replay for a message that is processed,
	// erased, or still on its way to its handler.
	ErrNotReplayable = operator.ErrNotReplayable
)

// Get returns the stored message with id, or an error where
// errors.Is(err, ErrNotFound) is true.
func (ib *Inbox) Get(ctx context.Context, id uuid.UUID) (*Message, error) {
	return getMessage(ctx, ib.pool, id)
}

// GetTx is Get in tx.
func (ib *Inbox) GetTx(ctx context.Context, tx pgx.Tx, id uuid.UUID) (*Message, error) {
	return getMessage(ctx, tx, id)
}

func getMessage(ctx context.Context, db dbsqlc.DBTX, id uuid.UUID) (*Message, error) {
	row, err := dbsqlc.New(db).InboxMessageGet(ctx, id)
	if err != nil {
		return nil, translate(err)
	}
	return messageFromRow(&row), nil
}

// Replay re-enqueues a message whose processing ended without success, in
// its own transaction. See ReplayTx.
func (ib *Inbox) Replay(ctx context.Context, id uuid.UUID) error {
	return ib.txFunc(ctx, func(tx pgx.Tx) error { return ib.ReplayTx(ctx, tx, id) })
}

// ReplayTx re-enqueues a message in tx: its status returns to received and a
// new River job runs its handler with a fresh set of attempts. It replays a
// failed or dead message (a pending retry of the old job is deleted), and a
// received one whose job is gone or finished without processing it (a job
// discarded by a leader without Wharf's workers, or cancelled by hand). The
// new job goes to the old job's queue when River still has it, else to the
// inbox's. It returns an error where errors.Is(err, ErrNotFound) or
// errors.Is(err, ErrNotReplayable) is true when the message is missing, was
// erased, or is processed or still on its way; nothing changes then.
func (ib *Inbox) ReplayTx(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	return ib.operator.ReplayTx(ctx, tx, id)
}

// Forget erases the body, headers and last error of every stored delivery
// of the event (source, eventID), for erasure requests, and returns how
// many messages it erased. Metadata stays (ids, type, status, times), and
// so does the dedupe key, as a tombstone kept for the retention jobs'
// ErasedKeyRetention (90 days by default) from now, whatever the dedupe
// window: a redelivery meanwhile is a duplicate and stores nothing.
// A message not yet processed is marked dead, since it can no longer be
// processed. It returns an error where errors.Is(err, ErrNotFound) is true
// when no message has that event id.
func (ib *Inbox) Forget(ctx context.Context, source, eventID string) (int, error) {
	var erased int
	err := ib.txFunc(ctx, func(tx pgx.Tx) error {
		n, err := ib.ForgetTx(ctx, tx, source, eventID)
		erased = n
		return err
	})
	if err != nil {
		return 0, err
	}
	ib.logger.InfoContext(ctx, "inbox: event erased on request", "source", source, "event_id", eventID, "messages", erased)
	return erased, nil
}

// ForgetTx is Forget in tx: the erasure holds once tx commits, and tx's
// rollback undoes it. It logs nothing (Forget logs after its commit).
func (ib *Inbox) ForgetTx(ctx context.Context, tx pgx.Tx, source, eventID string) (int, error) {
	return ib.operator.ForgetTx(ctx, tx, source, eventID)
}

// translate maps database errors to the package's sentinels.
func translate(err error) error { return shared.NotFound(err, ErrNotFound) }

// ListParams filters List. The zero value lists the newest messages.
type ListParams struct {
	// Source keeps only messages from this source. Defaults to all.
	Source string
	// Status keeps only messages in this status. Defaults to all.
	Status Status
	// EventType keeps only messages of this event type. Defaults to all.
	EventType string
	// EventID keeps only the message with this event id (one per source).
	// Defaults to all.
	EventID string
	// Since keeps only messages received at or after it; older partitions
	// are not read. Defaults to all (the zero time).
	Since time.Time
	// OmitBody leaves Body and Header nil: a listing that shows neither
	// reads less. Defaults to false.
	OmitBody bool
	// Limit caps the number of messages of one page. Defaults to 100; at
	// most 10000.
	Limit int
	// After is the cursor of the last message of the previous page
	// (Cursor of it): the page holds the messages listed after it. Defaults
	// to the first page. A malformed cursor is an error where errors.Is(err,
	// ErrInvalidCursor) is true.
	After string
}

// defaultListLimit is ListParams.Limit's default: List's page size, and
// ReplayMatching's.
const defaultListLimit = 100

// ErrInvalidCursor is returned by List for a ListParams.After that no
// Cursor returned.
var ErrInvalidCursor = errors.New("inbox: invalid list cursor")

// Cursor returns the list cursor of m: give it as ListParams.After to list
// the messages after m. It is opaque, URL-safe and holds no payload.
func Cursor(m *Message) string { return shared.EncodeTimeCursor(m.ReceivedAt, m.ID) }

// List returns a page of stored messages, newest first; page on with
// ListParams.After set to Cursor of the last one (a keyset: a deep page
// costs what the first does, and rows received meanwhile neither repeat nor
// shift the pages).
func (ib *Inbox) List(ctx context.Context, params *ListParams) ([]*Message, error) {
	return ib.list(ctx, ib.pool, params)
}

// ListTx is List in tx.
func (ib *Inbox) ListTx(ctx context.Context, tx pgx.Tx, params *ListParams) ([]*Message, error) {
	return ib.list(ctx, tx, params)
}

func (ib *Inbox) list(ctx context.Context, db dbsqlc.DBTX, params *ListParams) ([]*Message, error) {
	if params == nil {
		params = &ListParams{}
	}
	limit := params.Limit
	switch {
	case limit <= 0:
		limit = defaultListLimit
	case limit > 10000:
		return nil, fmt.Errorf("inbox: list limit %d is over 10000", limit)
	}
	for name, v := range map[string]string{"source": params.Source, "event type": params.EventType, "event id": params.EventID} {
		if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
			return nil, fmt.Errorf("%w: list filter %s is not UTF-8 text", ErrInvalidMessage, name)
		}
	}
	q := dbsqlc.InboxMessageListByEventIDParams{OmitBody: params.OmitBody, MaxRows: int32(limit), Since: listFloor}
	if params.Status != "" {
		s := string(params.Status)
		q.Status = &s
	}
	if params.EventType != "" {
		q.EventType = &params.EventType
	}
	if !params.Since.IsZero() {
		q.Since = params.Since
	}
	if params.After != "" {
		at, id, err := shared.DecodeTimeCursor(params.After)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidCursor, err)
		}
		q.AfterReceivedAt, q.AfterID = &at, &id
	}
	queries := dbsqlc.New(db)
	var rows []dbsqlc.WharfInboxMessage
	if params.EventID != "" {
		q.EventID, q.Sources = params.EventID, []string{params.Source}
		if params.Source == "" {
			sources, err := queries.InboxMessageSources(ctx)
			if err != nil {
				return nil, err
			}
			q.Sources = sources
		}
		found, err := queries.InboxMessageListByEventID(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, r := range found {
			rows = append(rows, dbsqlc.WharfInboxMessage(r))
		}
	} else {
		query := dbsqlc.InboxMessageListParams{OmitBody: q.OmitBody, Status: q.Status, EventType: q.EventType,
			Since: q.Since, AfterReceivedAt: q.AfterReceivedAt, AfterID: q.AfterID, MaxRows: q.MaxRows}
		if params.Source != "" {
			query.Source = &params.Source
		}
		found, err := queries.InboxMessageList(ctx, query)
		if err != nil {
			return nil, err
		}
		for _, r := range found {
			rows = append(rows, dbsqlc.WharfInboxMessage(r))
		}
	}
	out := make([]*Message, len(rows))
	for i := range rows {
		out[i] = messageFromRow(&rows[i])
		if params.OmitBody {
			out[i].Body, out[i].Header = nil, nil
		}
	}
	return out, nil
}

// listFloor is List's lower bound on received_at when none is asked for:
// before any message, and a value (not NULL), so that a generic plan of
// the list query still prunes partitions by it.
var listFloor = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)

// ReplayMatching replays the messages matching params, newest first, each
// in its own transaction (see Replay), and returns how many it replayed and
// how many it skipped because they could no longer be replayed (processed
// or erased meanwhile). params.Status must be StatusDead or StatusFailed;
// params.Limit is the page size read at a time (defaults to 100), and
// params.After where to start. It stops after max messages (replayed or
// skipped) when max > 0: a caller answering a request replays in bounded
// steps. progress, when not nil, is called after each page with the counts
// so far. On an error the counts say what was done.
func (ib *Inbox) ReplayMatching(ctx context.Context, params *ListParams, max int, progress func(replayed, skipped int)) (replayed, skipped int, err error) {
	if params == nil || (params.Status != StatusDead && params.Status != StatusFailed) {
		return 0, 0, errors.New("inbox: replay matching: status must be dead or failed")
	}
	page := *params
	page.OmitBody = true
	if page.Limit <= 0 {
		page.Limit = defaultListLimit
	}
	for {
		if max > 0 {
			page.Limit = min(page.Limit, max-replayed-skipped)
		}
		msgs, err := ib.List(ctx, &page)
		if err != nil {
			return replayed, skipped, err
		}
		for _, m := range msgs {
			switch err := ib.Replay(ctx, m.ID); {
			case errors.Is(err, ErrNotReplayable) || errors.Is(err, ErrNotFound):
				skipped++
			case err != nil:
				return replayed, skipped, fmt.Errorf("inbox: replay %s: %w", m.ID, err)
			default:
				replayed++
			}
		}
		if progress != nil {
			progress(replayed, skipped)
		}
		if len(msgs) < page.Limit || (max > 0 && replayed+skipped >= max) {
			return replayed, skipped, nil
		}
		page.After = Cursor(msgs[len(msgs)-1])
	}
}
