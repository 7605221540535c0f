package inbox_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
)

// TestHandlerEditingItsMessageChangesNothing: what a Handler does to the
// *Message it gets changes nothing the worker does after it. The worker
// once went on with the handler's own Message: a handler that changed
// Attempts before failing had its failure go unrecorded (the record
// checks the attempts it read) and its job cancelled, the message left
// unfinished; one that cleared OrderingKey left the next message of its
// key parked, with nothing to wake it but a rescue.
func TestHandlerEditingItsMessageChangesNothing(t *testing.T) {
	t.Parallel()
	// Each message alone on its own job, where the handler's Message was
	// the worker's.
	cfg := func() *setupOpts { return &setupOpts{cfg: &inbox.Config{BatchSize: 1, MaxAttempts: 1000}} }
	receive := func(t *testing.T, b *testBundle, ids ...string) {
		for _, id := range ids { // one by one: receipt order is unambiguous
			receiveMany(t, b.pool, b.inbox, []inbox.Incoming{{Source: "payments", EventID: id, Body: []byte(`{}`), OrderingKey: "sub_1"}})
		}
	}

	t.Run("attempts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, cfg())
		var failed atomic.Bool
		b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
			if failed.Swap(true) {
				return nil
			}
			msg.Attempts = 42
			return errors.New("downstream down")
		})
		receive(t, b, "evt_1")
		b.startWorkers(t)
		awaitSettled(t, b.pool, inbox.StatusProcessed)
		var attempts int
		require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT attempts FROM wharf_inbox_messages").Scan(&attempts))
		require.Equal(t, 2, attempts, "the failed attempt and the one that succeeded")
	})

	t.Run("ordering key", func(t *testing.T) {
		t.Parallel()
		b := setup(t, cfg())
		b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
			if msg.EventID != "evt_1" {
				return nil
			}
			// Fails until the next message of its key is parked behind it.
			var parked bool
			if err := tx.QueryRow(ctx, "SELECT job_id IS NULL FROM wharf_inbox_messages WHERE event_id = 'evt_2'").Scan(&parked); err != nil {
				return err
			}
			if !parked {
				return errors.New("not yet")
			}
			msg.OrderingKey = ""
			return nil
		})
		receive(t, b, "evt_1", "evt_2")
		b.startWorkers(t)
		awaitSettled(t, b.pool, inbox.StatusProcessed)
	})
}
