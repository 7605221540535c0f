package inbox

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/pgxtx"
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
// the row of the message's immediate predecessor (the last earlier
// unfinished message of its key: the one whose finish, or skip, wakes it),
// which that message's processing (FOR UPDATE) and every update of its
// status wait for, so its wake sees the park. A message that finds its
// predecessor being processed or updated at that moment (its lock taken)
// snoozes briefly and looks again. The batch worker asks once which of its
// messages an earlier one outside the batch holds (the last such one) and
// tracks those inside it itself; after waiting briefly for another batch
// that holds them, it parks a held message itself when it can take the
// lock without waiting (see parkHeld), and otherwise hands it on to a new
// job. A batch's finished messages wake the next ones of their keys
// together: one batch job for those received together. Rescue is the net
// under all of it.

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
	// A generic plan without sequential scans: a custom one, on statistics
	// that say almost no message is unfinished (taken while all were
	// processed), sorted every later unfinished message of the key (the
	// empty later partitions' scans cost nothing) to find the first.
	next, err := dbsqlc.New(pgxtx.GenericPlans{DBTX: tx}).InboxMessageNextWaiting(ctx, dbsqlc.InboxMessageNextWaitingParams{
		Source: msg.Source, OrderingKey: msg.OrderingKey, ReceivedAt: msg.ReceivedAt, ID: msg.ID,
	})
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && next.JobID != nil) {
		return nil // none, or it has a job: it runs, or waits for its retry
	}
	if err != nil {
		return fmt.Errorf("inbox: ordering: next message: %w", err)
	}
	return ib.wake(ctx, tx, []parkedHead{{
		id: next.ID, receivedAt: next.ReceivedAt, source: msg.Source, orderingKey: msg.OrderingKey,
	}})
}

// parkedHead is a parked message to wake: the next unfinished message of
// its ordering key after one that finished. status is "" when not known.
type parkedHead struct {
	id                  uuid.UUID
	receivedAt          time.Time
	status              Status
	source, orderingKey string
}

// wake gives heads, parked messages whose predecessors finished in tx,
// jobs, each with its run: the parked messages of its key that follow it
// unbroken in its receive batch (InboxMessagesParkedRuns), so that a key's
// backlog goes on a batch at a time. One message a job, each job's wake of
// the next waiting for River's next fetch, drained a hot key's backlog at
// some 40 messages a second. A head that has failed before keeps its
// attempts on a job of its own, and wakes no run; the runs of one receipt
// time share batch jobs of up to BatchSize (and inboxjob.MaxMessages) messages,
// a run never split, processed in one transaction in receipt order.
func (ib *Inbox) wake(ctx context.Context, tx pgx.Tx, heads []parkedHead) error {
	limit := min(ib.batchSize, inboxjob.MaxMessages)
	runs := make([][]uuid.UUID, len(heads))
	for i, h := range heads {
		runs[i] = []uuid.UUID{h.id}
	}
	if limit > 1 {
		var params dbsqlc.InboxMessagesParkedRunsParams
		params.RunLimit = int32(limit)
		for _, h := range heads {
			if h.status == StatusFailed {
				continue
			}
			params.Ids = append(params.Ids, h.id.String())
			params.ReceivedAts = append(params.ReceivedAts, h.receivedAt)
			params.Sources = append(params.Sources, h.source)
			params.OrderingKeys = append(params.OrderingKeys, h.orderingKey)
		}
		if len(params.Ids) > 0 {
			rows, err := dbsqlc.New(pgxtx.GenericPlans{DBTX: tx}).InboxMessagesParkedRuns(ctx, params)
			if err != nil {
				return fmt.Errorf("inbox: ordering: messages to wake: %w", err)
			}
			byHead := map[uuid.UUID][]dbsqlc.InboxMessagesParkedRunsRow{}
			for _, r := range rows {
				byHead[r.HeadID] = append(byHead[r.HeadID], r)
			}
			taken := map[uuid.UUID]bool{}
			for i, h := range heads {
				if h.status == StatusFailed {
					continue // not asked for: alone, on a job of its own
				}
				run := byHead[h.id]
				if taken[h.id] {
					runs[i] = nil // in an earlier head's run
					continue
				}
				taken[h.id] = true
				if len(run) == 0 || run[0].ID != h.id || run[0].JobID != nil {
					// Finished, or given a job, since it was found: nothing
					// to wake.
					runs[i] = nil
					continue
				}
				if heads[i].status = Status(run[0].Status); heads[i].status != StatusReceived {
					continue // failed before: alone, on a job of its own
				}
				for _, r := range run[1:] {
					if r.JobID != nil || Status(r.Status) != StatusReceived || taken[r.ID] {
						break // it runs, or waits for its retry: the rest wait for it
					}
					taken[r.ID] = true
					runs[i] = append(runs[i], r.ID)
				}
			}
		}
	}

	var inserts []river.InsertManyParams
	single := func(id uuid.UUID, at time.Time) {
		inserts = append(inserts, river.InsertManyParams{
			Args: inboxjob.ProcessArgs{MessageID: id, ReceivedAt: at}, InsertOpts: ib.jobs.Opts(),
		})
	}
	groups := map[time.Time][][]uuid.UUID{}
	var times []time.Time
	for i, h := range heads {
		switch {
		case runs[i] == nil:
		case h.status != StatusReceived || limit <= 1:
			single(h.id, h.receivedAt)
		default:
			if _, ok := groups[h.receivedAt]; !ok {
				times = append(times, h.receivedAt)
			}
			groups[h.receivedAt] = append(groups[h.receivedAt], runs[i])
		}
	}
	for _, at := range times {
		var ids []uuid.UUID
		flush := func() {
			switch len(ids) {
			case 0:
			case 1:
				single(ids[0], at)
			default:
				slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
				inserts = append(inserts, river.InsertManyParams{
					Args: inboxjob.BatchArgs{ReceivedAt: at, MessageIDs: ids}, InsertOpts: ib.jobs.BatchOpts(),
				})
			}
			ids = nil
		}
		for _, run := range groups[at] {
			if len(ids)+len(run) > limit {
				flush()
			}
			ids = append(ids, run...)
		}
		flush()
	}
	if len(inserts) == 0 {
		return nil
	}
	if _, err := ib.jobs.Assign(ctx, tx, inserts); err != nil {
		return fmt.Errorf("inbox: ordering: wake messages: %w", err)
	}
	return nil
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
	text := inboxjob.LastError("skipped by an operator: " + reason)
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
			if err := ib.jobs.Delete(ctx, tx, job); err != nil {
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
	outside map[uuid.UUID]msgRef // the first earlier unfinished message outside the batch
	inside  map[orderKey]bool    // keys with a held or failed message earlier in the batch
}

type orderKey struct{ source, key string }

// msgRef names a message row.
type msgRef struct {
	receivedAt time.Time
	id         uuid.UUID
}

func (ib *Inbox) newBatchOrder(ctx context.Context, tx pgx.Tx, job *river.Job[inboxjob.BatchArgs], rows []dbsqlc.WharfInboxMessage) (*batchOrder, error) {
	o := &batchOrder{}
	var params dbsqlc.InboxMessagesHeldOutsideBatchParams
	for i := range rows {
		if rows[i].OrderingKey != "" && inboxjob.OwnedBy(&rows[i], job.ID) {
			params.Ids = append(params.Ids, rows[i].ID.String())
			params.Sources = append(params.Sources, rows[i].Source)
			params.OrderingKeys = append(params.OrderingKeys, rows[i].OrderingKey)
		}
	}
	if len(params.Ids) == 0 {
		return o, nil
	}
	params.ReceivedAt = job.Args.ReceivedAt
	q := dbsqlc.New(pgxtx.GenericPlans{DBTX: tx})
	held, err := q.InboxMessagesHeldOutsideBatch(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("inbox: ordering check: %w", err)
	}
	if len(held) > 0 {
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
	}
	o.outside = make(map[uuid.UUID]msgRef, len(held))
	for _, h := range held {
		o.outside[h.ID] = msgRef{receivedAt: h.BlockerReceivedAt, id: h.BlockerID}
	}
	o.inside = map[orderKey]bool{}
	return o, nil
}

// orderingLockWait bounds how long a batch waits for other transactions to
// let go of the earlier messages its messages wait for (see awaitUnlocked).
const orderingLockWait = 500 * time.Millisecond

// awaitUnlocked waits, for orderingLockWait at most, until no other
// transaction holds the given messages: a batch processing them, most
// likely, which then has committed. The locks it takes go at once (its
// savepoint is rolled back): the batch's own processing does not hold
// those messages back. The rows are locked in receipt order, and a lock or
// statement timeout or a deadlock (two batches received in the same
// microsecond can wait on each other) only ends the wait.
func awaitUnlocked(ctx context.Context, tx pgx.Tx, params dbsqlc.InboxMessagesAwaitUnlockedParams) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	q := dbsqlc.New(sp)
	wait := fmt.Sprintf("%dms", orderingLockWait.Milliseconds())
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

// held reports whether msg must wait and, when the message it waits for is
// outside the batch (no earlier message of its key in the batch waits or
// failed), which one. If msg must wait, so must the batch's later messages
// of its key.
func (o *batchOrder) held(msg *Message) (held bool, outside *msgRef) {
	if msg.OrderingKey == "" || o.inside == nil {
		return false, nil
	}
	k := orderKey{msg.Source, msg.OrderingKey}
	// An earlier message outside the batch comes first, even when one in
	// the batch holds msg too: it may lie between the two, and then it is
	// the one whose finish wakes msg, so the park must take its lock.
	if ref, ok := o.outside[msg.ID]; ok {
		o.inside[k] = true
		return true, &ref
	}
	if o.inside[k] {
		return true, nil
	}
	return false, nil
}

// hold makes the batch's later messages of msg's key wait (msg failed).
func (o *batchOrder) hold(msg *Message) {
	if msg.OrderingKey != "" && o.inside != nil {
		o.inside[orderKey{msg.Source, msg.OrderingKey}] = true
	}
}

// heldMessage is a batch's message that must wait, and the message outside
// the batch it waits for, if any.
type heldMessage struct {
	msg     *Message
	outside *msgRef
}

// parkHeld parks, in the batch's transaction tx, the held messages it can
// and returns the others, which go to jobs of their own (which park them).
// A message waiting for one inside the batch parks: the batch holds that
// message's row until it commits, so that message's finish, and its wake,
// come after the park. A message waiting for one outside the batch parks
// when this transaction can take that message's SHARE lock at once (the
// lock blockedTx takes, for the same reason); when another transaction is
// processing or updating it, the message goes to a job of its own, which
// looks again shortly. The locks are taken here, just before the commit,
// so that they hold back the earlier messages' processing for moments only.
func (ib *Inbox) parkHeld(ctx context.Context, tx pgx.Tx, receivedAt time.Time, held []heldMessage) ([]*Message, error) {
	q := dbsqlc.New(tx)
	var lock dbsqlc.InboxMessagesLockUnfinishedParams
	for _, h := range held {
		if h.outside != nil {
			lock.ReceivedAts = append(lock.ReceivedAts, h.outside.receivedAt)
			lock.Ids = append(lock.Ids, h.outside.id.String())
		}
	}
	var locked map[uuid.UUID]bool
	if len(lock.Ids) > 0 {
		ids, err := q.InboxMessagesLockUnfinished(ctx, lock)
		if err != nil {
			return nil, fmt.Errorf("inbox: ordering: lock earlier messages: %w", err)
		}
		locked = make(map[uuid.UUID]bool, len(ids))
		for _, id := range ids {
			locked[id] = true
		}
	}
	var park []string
	var rest []*Message
	for _, h := range held {
		if h.outside == nil || locked[h.outside.id] {
			park = append(park, h.msg.ID.String())
		} else {
			rest = append(rest, h.msg)
		}
	}
	if len(park) > 0 {
		if err := q.InboxMessagesPark(ctx, dbsqlc.InboxMessagesParkParams{
			Now: ib.clock(), ReceivedAt: receivedAt, Ids: park,
		}); err != nil {
			return nil, fmt.Errorf("inbox: ordering: park messages: %w", err)
		}
	}
	return rest, nil
}

// orderingHandOns bounds how many times a batch's held messages whose
// earlier messages are being processed go on together to a new batch job;
// past it they go to jobs of their own, which park them.
const orderingHandOns = 3

// handOn gives msgs, messages of batch job that wait for earlier ones
// another transaction holds (being processed, most likely), a new batch job
// that runs at once: by the time it runs, the earlier ones have most likely
// finished and the messages are processed together. Its Waits counts the
// hand-ons.
func (ib *Inbox) handOn(ctx context.Context, tx pgx.Tx, job *river.Job[inboxjob.BatchArgs], msgs []*Message) error {
	ids := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	if err := ib.continueBatch(ctx, tx, job, ids, job.Args.Waits+1); err != nil {
		return fmt.Errorf("inbox: ordering: hand messages on: %w", err)
	}
	return nil
}

// continueBatch gives ids, messages of batch job, a new batch job on its
// queue that runs at once, with waits as its Waits.
func (ib *Inbox) continueBatch(ctx context.Context, tx pgx.Tx, job *river.Job[inboxjob.BatchArgs], ids []uuid.UUID, waits int) error {
	args := inboxjob.BatchArgs{ReceivedAt: job.Args.ReceivedAt, MessageIDs: ids, Waits: waits}
	opts := ib.jobs.BatchOpts()
	opts.Queue = job.Queue
	_, err := ib.jobs.Assign(ctx, tx, []river.InsertManyParams{{Args: args, InsertOpts: opts}})
	return err
}

// wakeNextOf is wakeNext for the processed messages of a batch, sharing
// receivedAt. The messages it wakes that share a receipt time and have not
// failed before go to one batch job, processed in one transaction; the
// others to a job each (a failing message keeps its attempts on its own
// job).
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
	parked, err := dbsqlc.New(pgxtx.GenericPlans{DBTX: tx}).InboxMessagesNextParked(ctx, params)
	if err != nil || len(parked) == 0 {
		return err
	}
	heads := make([]parkedHead, len(parked))
	for i, p := range parked {
		heads[i] = parkedHead{id: p.ID, receivedAt: p.ReceivedAt, status: Status(p.Status), source: p.Source, orderingKey: p.OrderingKey}
	}
	// In receipt order, so that a head in another's run comes after it.
	slices.SortFunc(heads, func(a, b parkedHead) int {
		return cmp.Or(a.receivedAt.Compare(b.receivedAt), bytes.Compare(a.id[:], b.id[:]))
	})
	return ib.wake(ctx, tx, heads)
}
