package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
)

// callLog records the event ids of each handler call, in call order.
type callLog struct {
	mu    sync.Mutex
	calls [][]string
}

func (l *callLog) add(msgs []*inbox.Message) {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.EventID
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, ids)
}

func (l *callLog) all() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]string(nil), l.calls...)
}

// TestHandleBatchTakesRunsOfMessages: a BatchHandler gets the messages of a
// processing batch that follow one another and resolve to its
// registration, in receipt order, in one call; a message of another
// handler between them splits the run. Each effect commits once, with its
// message marked processed on the batch's job.
func TestHandleBatchTakesRunsOfMessages(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	createEffects(t, b.pool)
	var log callLog
	b.inbox.HandleBatch("payments", "paid", func(ctx context.Context, tx pgx.Tx, msgs []*inbox.Message) error {
		log.add(msgs)
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = m.EventID
		}
		// One statement for the whole run.
		_, err := tx.Exec(ctx, "INSERT INTO effects (event_id) SELECT unnest($1::text[])", ids)
		return err
	})
	b.inbox.Handle("payments", "other", func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		log.add([]*inbox.Message{msg})
		return applyEffect(ctx, tx, msg)
	})
	types := []string{"paid", "paid", "other", "paid", "paid", "paid"}
	batch := typedPayments(types...)
	results := receiveMany(t, b.pool, b.inbox, batch)
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed)

	id := func(i int) string { return batch[i].EventID }
	require.Equal(t, [][]string{{id(0), id(1)}, {id(2)}, {id(3), id(4), id(5)}}, log.all())
	for i := range batch {
		msg, err := b.inbox.Get(ctx, results[i].MessageID)
		require.NoError(t, err)
		require.Equal(t, inbox.StatusProcessed, msg.Status, id(i))
		require.Equal(t, 1, msg.Attempts, id(i))
		require.NotNil(t, msg.ProcessedAt, id(i))
		require.Equal(t, results[0].JobID, jobOf(t, b.pool, msg.ID), "%s stayed on the batch's job", id(i))
		require.Equal(t, 1, effectCount(t, b.pool, id(i)), id(i))
	}
}

// TestHandleBatchFailureGoesAgainAlone: when a BatchHandler fails (an error
// or a panic), its writes and marks roll back and it runs again for each of
// the messages alone, in the same transaction: the good ones commit once on
// the batch's job, the bad one fails alone (here permanently: dead, no
// effect).
func TestHandleBatchFailureGoesAgainAlone(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"error", "panic"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			ctx := context.Background()
			createEffects(t, b.pool)
			var log callLog
			b.inbox.HandleBatch("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msgs []*inbox.Message) error {
				log.add(msgs)
				for _, m := range msgs {
					if err := applyEffect(ctx, tx, m); err != nil {
						return err
					}
				}
				for _, m := range msgs {
					if m.EventType == "poison" {
						if how == "panic" && len(msgs) > 1 {
							panic("handler bug")
						}
						return inbox.Permanent(errors.New("unknown account"))
					}
				}
				return nil
			})
			types := []string{"ok", "ok", "poison", "ok"}
			batch := typedPayments(types...)
			results := receiveMany(t, b.pool, b.inbox, batch)
			b.startWorkers(t)
			awaitSettled(t, b.pool, inbox.StatusProcessed, inbox.StatusDead)

			id := func(i int) string { return batch[i].EventID }
			require.Equal(t, [][]string{{id(0), id(1), id(2), id(3)}, {id(0)}, {id(1)}, {id(2)}, {id(3)}}, log.all(),
				"one call for the run, then one per message")
			for i, typ := range types {
				msg, err := b.inbox.Get(ctx, results[i].MessageID)
				require.NoError(t, err)
				if typ == "poison" {
					require.Equal(t, inbox.StatusDead, msg.Status)
					require.Equal(t, 1, msg.Attempts)
					require.Contains(t, msg.LastError, "unknown account")
					require.Zero(t, effectCount(t, b.pool, id(i)))
					continue
				}
				require.Equal(t, inbox.StatusProcessed, msg.Status, id(i))
				require.Equal(t, 1, msg.Attempts, id(i))
				require.Equal(t, results[0].JobID, jobOf(t, b.pool, msg.ID), "%s stayed on the batch's job", id(i))
				require.Equal(t, 1, effectCount(t, b.pool, id(i)), "%s: the failed run's write rolled back", id(i))
			}
		})
	}
}

// TestHandleReplacesHandleBatch: registering a pair again replaces its
// handler, whichever kind either is; a BatchHandler registered for one
// message's retry job gets that message alone.
func TestHandleReplacesHandleBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	createEffects(t, b.pool)
	var batchCalls, oneCalls callLog
	b.inbox.HandleBatch("payments", "paid", func(ctx context.Context, tx pgx.Tx, msgs []*inbox.Message) error {
		batchCalls.add(msgs)
		return nil
	})
	b.inbox.Handle("payments", "paid", func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		oneCalls.add([]*inbox.Message{msg})
		return applyEffect(ctx, tx, msg)
	})
	b.inbox.HandleBatch("payments", "alone", func(ctx context.Context, tx pgx.Tx, msgs []*inbox.Message) error {
		batchCalls.add(msgs)
		for _, m := range msgs {
			if err := applyEffect(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	})
	batch := typedPayments("paid", "paid")
	receiveMany(t, b.pool, b.inbox, batch)
	single := typedPayments("x", "alone")[1:] // a batch of one: a job of its own
	receiveMany(t, b.pool, b.inbox, single)
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	require.ElementsMatch(t, [][]string{{batch[0].EventID}, {batch[1].EventID}}, oneCalls.all())
	require.Equal(t, [][]string{{single[0].EventID}}, batchCalls.all())
	require.Equal(t, 1, effectCount(t, b.pool, single[0].EventID))
}

// TestHandleBatchOwnsItsCopies: a BatchHandler may reorder its slice and
// clear what it decoded before failing; the messages then go again alone in
// receipt order and whole. (The worker once handed over its own slice and
// messages: the fallback ran one ordering key's messages in the handler's
// order, and good messages died on their cleared bodies.)
func TestHandleBatchOwnsItsCopies(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 1}})
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, "CREATE TABLE applied (event_id text NOT NULL, n serial)")
	require.NoError(t, err)
	b.inbox.HandleBatch("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msgs []*inbox.Message) error {
		slices.SortFunc(msgs, func(a, b *inbox.Message) int { return strings.Compare(b.EventID, a.EventID) })
		for _, m := range msgs {
			if string(m.Body) != `{}` {
				return inbox.Permanent(fmt.Errorf("body of %s is %q", m.EventID, m.Body))
			}
			m.Body = nil // decoded: dropped
		}
		for _, m := range msgs {
			if m.EventType == "poison" {
				return inbox.Permanent(errors.New("bad payment"))
			}
			if _, err := tx.Exec(ctx, "INSERT INTO applied (event_id) VALUES ($1)", m.EventID); err != nil {
				return err
			}
		}
		return nil
	})
	var batch []inbox.Incoming
	for i, typ := range []string{"ok", "ok", "ok", "poison"} {
		batch = append(batch, inbox.Incoming{Source: "payments", EventID: fmt.Sprintf("evt_%d_%s", i, typ), EventType: typ,
			Body: []byte(`{}`), OrderingKey: "sub_1"})
	}
	results := receiveMany(t, b.pool, b.inbox, batch)
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed, inbox.StatusDead)
	rows, err := b.pool.Query(ctx, "SELECT event_id FROM applied ORDER BY n")
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"evt_0_ok", "evt_1_ok", "evt_2_ok"}, got, "one ordering key's messages, applied once each in receipt order")
	for i := range batch[:3] {
		msg, err := b.inbox.Get(ctx, results[i].MessageID)
		require.NoError(t, err)
		require.Equal(t, inbox.StatusProcessed, msg.Status, msg.LastError)
	}
}

// TestHandleBatchRejectsNil: registering a nil BatchHandler panics at once,
// not on every message.
func TestHandleBatchRejectsNil(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	require.PanicsWithValue(t, "inbox: HandleBatch with a nil BatchHandler", func() { b.inbox.HandleBatch("payments", "x", nil) })
}
