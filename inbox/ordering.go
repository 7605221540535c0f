package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// MaxOrderingKeyLength is the longest ordering key accepted, in characters.
const MaxOrderingKeyLength = 512

// orderingWaitError is a batch's message that must wait for an earlier one
// of its ordering key: it goes to a job of its own, which parks it.
type orderingWaitError struct{}

func (e *orderingWaitError) Error() string {
	return "inbox: an earlier message of its ordering key is unfinished"
}

// orderingKey returns the ordering key of a request to s: its
// OrderingHeader, else the first of its OrderingFields present in the body
// as a string or number; "" when the source orders nothing or the request
// has no key.
func (s *Source) orderingKey(h http.Header, body parsedBody) string {
	if s.OrderingHeader != "" {
		if v := strings.TrimSpace(h.Get(s.OrderingHeader)); v != "" {
			return storableKey(v)
		}
	}
	for _, field := range s.OrderingFields {
		if v, ok := lookupScalar(body.value, field); ok && v != "" {
			return storableKey(v)
		}
	}
	return ""
}

// storableKey is v, or "sha256:" and its hex SHA-256 when v is too long or
// not storable text: one key still maps to one sequence.
func storableKey(v string) string {
	if validText(v, 1, MaxOrderingKeyLength) {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// How ordering works. A message whose key has an earlier unfinished
// message (to process, or failing) waits for it, parked: it has no job.
// When a message finishes (processed, or dead: exhausted, Permanent,
// skipped, erased), its transaction gives the next unfinished message of
// its key a job if that one is parked (wakeNext). Parking and waking
// cannot miss each other: the parking transaction holds a SHARE lock on
// the earlier message's row, which that message's processing (FOR UPDATE)
// and every update of its status wait for, so its wake sees the park. A
// message that finds the earlier one being processed or updated at that
// moment (its lock taken) snoozes briefly and looks again. The batch worker
// takes no such lock (two batches could wait on each other): it asks once
// which of its messages an earlier one outside the batch holds, tracks
// those inside it itself, and hands a held message to a job of its own,
// which parks it.

// orderingBusyWait is how long a message snoozes when the earlier message
// of its key is being processed at that moment.
const orderingBusyWait = 25 * time.Millisecond

// errOrderingBusy means the earlier message of an ordering key is being
// processed or updated at this moment: look again shortly.
var errOrderingBusy = errors.New("inbox: the earlier message of its ordering key is being processed")

// blockedTx reports whether msg must wait for an earlier message of its
// ordering key, locking that message (see the comment above); it returns
// errOrderingBusy, leaving tx aborted, when another transaction holds it.
func blockedTx(ctx context.Context, tx pgx.Tx, msg *Message) (bool, error) {
	if msg.OrderingKey == "" {
		return false, nil
	}
	_, err := dbsqlc.New(tx).InboxMessageEarlierUnfinishedLocked(ctx, dbsqlc.InboxMessageEarlierUnfinishedLockedParams{
		Source: msg.Source, OrderingKey: msg.OrderingKey, ReceivedAt: msg.ReceivedAt, ID: msg.ID,
	})
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable:
		return false, errOrderingBusy
	case err != nil:
		return false, fmt.Errorf("inbox: ordering check: %w", err)
	}
	return true, nil
}

// park leaves msg without a job until the earlier message of its key
// finishes and wakes it.
func (ib *Inbox) park(ctx context.Context, tx pgx.Tx, msg *Message) error {
	if err := dbsqlc.New(tx).InboxMessagePark(ctx, dbsqlc.InboxMessageParkParams{
		Now: ib.clock(), ReceivedAt: msg.ReceivedAt, ID: msg.ID,
	}); err != nil {
		return fmt.Errorf("inbox: ordering: park message: %w", err)
	}
	return nil
}

// wakeNext gives the next unfinished message of msg's ordering key a job
// when it is parked: msg has finished, in tx.
func (ib *Inbox) wakeNext(ctx context.Context, tx pgx.Tx, msg *Message) error {
	if msg.OrderingKey == "" {
		return nil
	}
	q := dbsqlc.New(tx)
	next, err := q.InboxMessageNextWaiting(ctx, dbsqlc.InboxMessageNextWaitingParams{
		Source: msg.Source, OrderingKey: msg.OrderingKey, ReceivedAt: msg.ReceivedAt, ID: msg.ID,
	})
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && next.JobID != nil) {
		return nil // none, or it has a job: it runs, or waits for its retry
	}
	if err != nil {
		return fmt.Errorf("inbox: ordering: next message: %w", err)
	}
	job, err := ib.river.InsertTx(ctx, tx, processArgs{MessageID: next.ID, ReceivedAt: next.ReceivedAt}, ib.insertOpts())
	if err != nil {
		return fmt.Errorf("inbox: ordering: wake message %s: %w", next.ID, err)
	}
	return q.InboxMessagesSetJob(ctx, dbsqlc.InboxMessagesSetJobParams{
		Now: ib.clock(), ReceivedAt: next.ReceivedAt, Ids: []string{next.ID.String()}, JobIds: []int64{job.Job.ID},
	})
}

// wakeNextAfterFailure is wakeNext in a transaction of its own, for a
// message that a failure made dead outside its processing transaction.
func (ib *Inbox) wakeNextAfterFailure(ctx context.Context, msg *Message) {
	if msg.OrderingKey == "" {
		return
	}
	if err := ib.txFunc(ctx, func(tx pgx.Tx) error { return ib.wakeNext(ctx, tx, msg) }); err != nil {
		ib.logger.WarnContext(ctx, "inbox: ordering: could not wake the next message of the key; it runs when its snooze ends",
			"message_id", msg.ID, "error", err)
	}
}

// Skip dead-letters a message that is still to process or failing, on an
// operator's word, with reason as its last error, and deletes its waiting
// job: the later messages of its ordering key then go on. Like any dead
// message it can be replayed (which holds the later ones again, if they
// are still unfinished). It returns an error where errors.Is(err,
// ErrNotFound) is true for an unknown id, and ErrNotSkippable for a
// message already processed or dead.
func (ib *Inbox) Skip(ctx context.Context, id uuid.UUID, reason string) error {
	return ib.txFunc(ctx, func(tx pgx.Tx) error { return ib.SkipTx(ctx, tx, id, reason) })
}

// ErrNotSkippable is returned by Skip for a message that is processed or
// already dead.
var ErrNotSkippable = errors.New("inbox: message is finished; nothing to skip")

// SkipTx is Skip in tx.
func (ib *Inbox) SkipTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, reason string) error {
	q := dbsqlc.New(tx)
	row, err := q.InboxMessageGetByIDForUpdate(ctx, id)
	if err != nil {
		return translate(err)
	}
	text := truncateError("skipped by an operator: " + reason)
	skipped, err := q.InboxMessageSkip(ctx, dbsqlc.InboxMessageSkipParams{
		Reason: text, Now: ib.clock(), ReceivedAt: row.ReceivedAt, ID: row.ID,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("inbox: skip message %s (%s): %w", id, row.Status, ErrNotSkippable)
	}
	if err != nil {
		return fmt.Errorf("inbox: skip message %s: %w", id, err)
	}
	if err := ib.wakeNext(ctx, tx, messageFromRow(&skipped)); err != nil {
		return err
	}
	if skipped.JobID != nil {
		job, err := ib.river.JobGetTx(ctx, tx, *skipped.JobID)
		switch {
		case errors.Is(err, rivertype.ErrNotFound):
		case err != nil:
			return fmt.Errorf("inbox: skip message %s: look up job: %w", id, err)
		default:
			if err := ib.deleteJobTx(ctx, tx, job); err != nil {
				return err
			}
		}
	}
	return nil
}

// batchOrder answers, for the messages of one processing batch, whether an
// earlier unfinished message of their ordering key holds them: one query
// for earlier messages outside the batch, memory for those inside it
// (processed in receipt order, in this transaction).
type batchOrder struct {
	outside map[uuid.UUID]bool
	inside  map[orderKey]bool // keys with a held or failed message earlier in the batch
}

type orderKey struct{ source, key string }

func (ib *Inbox) newBatchOrder(ctx context.Context, tx pgx.Tx, job *river.Job[processBatchArgs], rows []dbsqlc.WharfInboxMessage) (*batchOrder, error) {
	o := &batchOrder{}
	var params dbsqlc.InboxMessagesHeldOutsideBatchParams
	for i := range rows {
		if rows[i].OrderingKey != "" && ownedBy(&rows[i], job.ID) {
			params.Ids = append(params.Ids, rows[i].ID.String())
			params.Sources = append(params.Sources, rows[i].Source)
			params.OrderingKeys = append(params.OrderingKeys, rows[i].OrderingKey)
		}
	}
	if len(params.Ids) == 0 {
		return o, nil
	}
	params.ReceivedAt = job.Args.ReceivedAt
	held, err := dbsqlc.New(tx).InboxMessagesHeldOutsideBatch(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("inbox: ordering check: %w", err)
	}
	o.outside = make(map[uuid.UUID]bool, len(held))
	for _, id := range held {
		o.outside[id] = true
	}
	o.inside = map[orderKey]bool{}
	return o, nil
}

// held reports whether msg must wait, and if so holds its key for the
// batch's later messages.
func (o *batchOrder) held(msg *Message) bool {
	if msg.OrderingKey == "" || o.inside == nil {
		return false
	}
	k := orderKey{msg.Source, msg.OrderingKey}
	if o.outside[msg.ID] || o.inside[k] {
		o.inside[k] = true
		return true
	}
	return false
}

// hold makes the batch's later messages of msg's key wait (msg failed).
func (o *batchOrder) hold(msg *Message) {
	if msg.OrderingKey != "" && o.inside != nil {
		o.inside[orderKey{msg.Source, msg.OrderingKey}] = true
	}
}

// wakeNextOf is wakeNext for the processed messages of a batch, sharing
// receivedAt, in two statements whatever their number.
func (ib *Inbox) wakeNextOf(ctx context.Context, tx pgx.Tx, receivedAt time.Time, finished []*Message) error {
	params := dbsqlc.InboxMessagesNextParkedParams{ReceivedAt: receivedAt}
	for _, m := range finished {
		if m.OrderingKey != "" {
			params.Ids = append(params.Ids, m.ID.String())
			params.Sources = append(params.Sources, m.Source)
			params.OrderingKeys = append(params.OrderingKeys, m.OrderingKey)
		}
	}
	if len(params.Ids) == 0 {
		return nil
	}
	q := dbsqlc.New(tx)
	parked, err := q.InboxMessagesNextParked(ctx, params)
	if err != nil || len(parked) == 0 {
		return err
	}
	for _, p := range parked {
		job, err := ib.river.InsertTx(ctx, tx, processArgs{MessageID: p.ID, ReceivedAt: p.ReceivedAt}, ib.insertOpts())
		if err != nil {
			return fmt.Errorf("inbox: ordering: wake message %s: %w", p.ID, err)
		}
		if err := q.InboxMessagesSetJob(ctx, dbsqlc.InboxMessagesSetJobParams{
			Now: ib.clock(), ReceivedAt: p.ReceivedAt, Ids: []string{p.ID.String()}, JobIds: []int64{job.Job.ID},
		}); err != nil {
			return fmt.Errorf("inbox: ordering: wake message %s: %w", p.ID, err)
		}
	}
	return nil
}
