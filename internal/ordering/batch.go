package ordering

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/pgxtx"
)

// BatchOrder answers, for the messages of one processing batch, whether an
// earlier unfinished message of their ordering key holds them: one query
// for earlier messages outside the batch, memory for those inside it
// (processed in receipt order, in this transaction).
type BatchOrder struct {
	outside map[uuid.UUID]msgRef // the first earlier unfinished message outside the batch
	inside  map[orderKey]bool    // keys with a held or failed message earlier in the batch
}

type orderKey struct{ source, key string }

// msgRef names a message row.
type msgRef struct {
	receivedAt time.Time
	id         uuid.UUID
}

// NewBatchOrder returns the BatchOrder of rows, the messages of batch job
// jobID received at receivedAt (those it no longer owns are left out).
func NewBatchOrder(ctx context.Context, tx pgx.Tx, jobID int64, receivedAt time.Time, rows []dbsqlc.WharfInboxMessage) (*BatchOrder, error) {
	o := &BatchOrder{}
	var params dbsqlc.InboxMessagesHeldOutsideBatchParams
	for i := range rows {
		if rows[i].OrderingKey != "" && inboxjob.OwnedBy(&rows[i], jobID) {
			params.Ids = append(params.Ids, rows[i].ID.String())
			params.Sources = append(params.Sources, rows[i].Source)
			params.OrderingKeys = append(params.OrderingKeys, rows[i].OrderingKey)
		}
	}
	if len(params.Ids) == 0 {
		return o, nil
	}
	params.ReceivedAt = receivedAt
	held, err := heldOutside(ctx, tx, params)
	if err != nil {
		return nil, err
	}
	o.outside = make(map[uuid.UUID]msgRef, len(held))
	for _, h := range held {
		o.outside[h.ID] = msgRef{receivedAt: h.BlockerReceivedAt, id: h.BlockerID}
	}
	o.inside = map[orderKey]bool{}
	return o, nil
}

// heldOutside returns the batch's messages that an earlier unfinished one
// outside the batch holds, with the last such one of each.
func heldOutside(ctx context.Context, tx pgx.Tx, params dbsqlc.InboxMessagesHeldOutsideBatchParams) ([]dbsqlc.InboxMessagesHeldOutsideBatchRow, error) {
	q := dbsqlc.New(pgxtx.GenericPlans{DBTX: tx})
	held, err := q.InboxMessagesHeldOutsideBatch(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("inbox: ordering check: %w", err)
	}
	if len(held) == 0 {
		return nil, nil
	}
	// The earlier messages are most often being processed by another
	// batch at this moment: wait for it, then look again, so that the
	// messages it held are processed now rather than parked and woken.
	var wait dbsqlc.InboxMessagesAwaitUnlockedParams
	for _, h := range held {
		wait.ReceivedAts = append(wait.ReceivedAts, h.BlockerReceivedAt)
		wait.Ids = append(wait.Ids, h.BlockerID.String())
	}
	if err := awaitUnlocked(ctx, tx, wait); err != nil {
		return nil, fmt.Errorf("inbox: ordering: wait for earlier messages: %w", err)
	}
	if held, err = q.InboxMessagesHeldOutsideBatch(ctx, params); err != nil {
		return nil, fmt.Errorf("inbox: ordering check: %w", err)
	}
	return held, nil
}

// lockWait bounds how long a batch waits for other transactions to let go
// of the earlier messages its messages wait for (see awaitUnlocked).
const lockWait = 500 * time.Millisecond

// awaitUnlocked waits, for lockWait at most, until no other transaction
// holds the given messages: a batch processing them, most likely, which
// then has committed. The locks it takes go at once (its savepoint is
// rolled back): the batch's own processing does not hold those messages
// back. The rows are locked in receipt order, and a lock or statement
// timeout or a deadlock (two batches received in the same microsecond can
// wait on each other) only ends the wait.
func awaitUnlocked(ctx context.Context, tx pgx.Tx, params dbsqlc.InboxMessagesAwaitUnlockedParams) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	q := dbsqlc.New(sp)
	wait := fmt.Sprintf("%dms", lockWait.Milliseconds())
	err = q.SetLocalLockTimeout(ctx, wait) // bounds each row's wait
	if err == nil {
		err = q.SetLocalStatementTimeout(ctx, wait) // and all of them
	}
	if err == nil {
		err = q.InboxMessagesAwaitUnlocked(ctx, params)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.LockNotAvailable || pgErr.Code == pgerrcode.DeadlockDetected ||
			pgErr.Code == pgerrcode.QueryCanceled) && ctx.Err() == nil {
			err = nil // the wait ends; the batch looks again
		}
	}
	if err != nil {
		_ = sp.Rollback(ctx)
		return err
	}
	// Also undoes the lock_timeout.
	return sp.Rollback(ctx)
}

// Held is a batch's message that must wait, and the message outside the
// batch it waits for, if any.
type Held struct {
	Msg     *dbsqlc.WharfInboxMessage // the message that waits
	outside *msgRef                   // the message outside the batch it waits for; nil if inside
}

// Holds reports whether msg must wait and, if so, returns it as Held (with
// the message it waits for when that one is outside the batch: no earlier
// message of its key in the batch waits or failed). If msg must wait, so
// must the batch's later messages of its key.
func (o *BatchOrder) Holds(msg *dbsqlc.WharfInboxMessage) (Held, bool) {
	if msg.OrderingKey == "" || o.inside == nil {
		return Held{}, false
	}
	k := orderKey{msg.Source, msg.OrderingKey}
	// An earlier message outside the batch comes first, even when one in
	// the batch holds msg too: it may lie between the two, and then it is
	// the one whose finish wakes msg, so the park must take its lock.
	if ref, ok := o.outside[msg.ID]; ok {
		o.inside[k] = true
		return Held{Msg: msg, outside: &ref}, true
	}
	if o.inside[k] {
		return Held{Msg: msg}, true
	}
	return Held{}, false
}

// Hold makes the batch's later messages of msg's key wait (msg failed).
func (o *BatchOrder) Hold(msg *dbsqlc.WharfInboxMessage) {
	if msg.OrderingKey != "" && o.inside != nil {
		o.inside[orderKey{msg.Source, msg.OrderingKey}] = true
	}
}

// ParkHeld parks, in the batch's transaction tx, the held messages it can
// and returns the others, which go to jobs of their own (which park them).
// A message waiting for one inside the batch parks: the batch holds that
// message's row until it commits, so that message's finish, and its wake,
// come after the park. A message waiting for one outside the batch parks
// when this transaction can take that message's SHARE lock at once (the
// lock Blocked takes, for the same reason); when another transaction is
// processing or updating it, the message goes to a job of its own, which
// looks again shortly. The locks are taken here, just before the commit,
// so that they hold back the earlier messages' processing for moments only.
func (o *Ordering) ParkHeld(ctx context.Context, tx pgx.Tx, receivedAt time.Time, held []Held) ([]*dbsqlc.WharfInboxMessage, error) {
	q := dbsqlc.New(tx)
	locked, err := lockOutside(ctx, q, held)
	if err != nil {
		return nil, err
	}
	var park []string
	var rest []*dbsqlc.WharfInboxMessage
	for _, h := range held {
		if h.outside == nil || locked[h.outside.id] {
			park = append(park, h.Msg.ID.String())
		} else {
			rest = append(rest, h.Msg)
		}
	}
	if len(park) > 0 {
		if err := q.InboxMessagesPark(ctx, dbsqlc.InboxMessagesParkParams{
			Now: o.config.Now(), ReceivedAt: receivedAt, Ids: park,
		}); err != nil {
			return nil, fmt.Errorf("inbox: ordering: park messages: %w", err)
		}
	}
	return rest, nil
}

// lockOutside takes, without waiting, the SHARE locks of the messages
// outside the batch that held messages wait for, and returns those it
// took.
func lockOutside(ctx context.Context, q *dbsqlc.Queries, held []Held) (map[uuid.UUID]bool, error) {
	var lock dbsqlc.InboxMessagesLockUnfinishedParams
	for _, h := range held {
		if h.outside != nil {
			lock.ReceivedAts = append(lock.ReceivedAts, h.outside.receivedAt)
			lock.Ids = append(lock.Ids, h.outside.id.String())
		}
	}
	if len(lock.Ids) == 0 {
		return nil, nil
	}
	ids, err := q.InboxMessagesLockUnfinished(ctx, lock)
	if err != nil {
		return nil, fmt.Errorf("inbox: ordering: lock earlier messages: %w", err)
	}
	locked := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		locked[id] = true
	}
	return locked, nil
}
