package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/pgxtx"
	"github.com/wharfhq/wharf/internal/testdb"
)

// staleBacklog is how many unfinished messages
// TestStatementsReadOnlyTheirMessages queues: on a few thousand a
// sequential scan is the planner's fair choice.
const staleBacklog = 30000

// TestStatementsReadOnlyTheirMessages runs each statement that finds a few
// messages by key and checks their status (the ordering path's lock of
// unfinished messages, its wait for locks, its park, its look for parked
// messages to wake, a finished message's wake of the next, a replay's
// requeue, retention's deletion of dedupe keys) on a backlog of 30,000
// unfinished messages whose statistics say almost none is unfinished: not
// taken yet (a new day's partition under a burst), or taken while all were
// processed (a backlog after a handler's outage). Each runs under a
// generic and a custom plan, in a transaction rolled back afterwards, and
// the message rows it read (through indexes or sequential scans) are
// counted. The lock of unfinished messages read every unfinished message
// through the index of unfinished messages, retention compared every
// expired key with every unfinished message, the park read its whole
// receive batch, and the wake sorted every later unfinished message of
// its key. (The wait, the look and the requeue read no more than they need
// here, with their statements as they were; on 3,000 messages of a few
// bytes each, the look read every unfinished one received since the
// batch, the wait every partition, which is the planner's fair choice on
// so little.)
func TestStatementsReadOnlyTheirMessages(t *testing.T) {
	t.Parallel()
	for _, stats := range []string{"never_analyzed", "analyzed_all_processed"} {
		t.Run(stats, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, nil)
			// Today's partition, made as a delivery makes it.
			receiveMany(t, b.pool, b.inbox, typedPayments("paid"))
			// 200 processed messages first, then the backlog, 50 to a
			// receive batch (sharing received_at), every one with its key,
			// a 1 KB body (with tiny rows, a sequential scan of the backlog
			// is the planner's fair choice), a job (none parked), and half
			// with an ordering key.
			_, err := b.pool.Exec(ctx, `
				INSERT INTO wharf_inbox_messages (id, received_at, source, event_id, body, payload_hash, status, updated_at, ordering_key, job_id)
				SELECT gen_random_uuid(), date_trunc('day', now()) + (i / 50) * interval '1 ms', 'payments' || (i % 3), 'stale_' || i,
				       convert_to('{"pad":"' || repeat('x', 1000) || '"}', 'UTF8'), '\x00', CASE WHEN i < 200 THEN 'processed' ELSE 'received' END, now(),
				       CASE WHEN i % 2 = 0 THEN 'k' || (i % 40) ELSE '' END, i + 1
				FROM generate_series(0, $1::int + 199) AS i`, staleBacklog)
			require.NoError(t, err)
			_, err = b.pool.Exec(ctx, `
				INSERT INTO wharf_inbox_keys (source, event_id, payload_hash, message_id, received_at)
				SELECT source, event_id, payload_hash, id, received_at FROM wharf_inbox_messages WHERE event_id LIKE 'stale_%'`)
			require.NoError(t, err)
			if stats == "analyzed_all_processed" {
				for _, stmt := range []string{
					`UPDATE wharf_inbox_messages SET status = 'processed' WHERE event_id LIKE 'stale_%'`,
					`ANALYZE wharf_inbox_messages`,
					`UPDATE wharf_inbox_messages SET status = 'received' WHERE event_id LIKE 'stale_%' AND event_id NOT IN (SELECT 'stale_' || i FROM generate_series(0, 199) AS i)`,
				} {
					_, err := b.pool.Exec(ctx, stmt)
					require.NoError(t, err)
				}
			}
			// One receive batch of the backlog, the 50 sharing received_at
			// after the processed ones.
			var at time.Time
			var ids, sources, keys []string
			rows, err := b.pool.Query(ctx, `SELECT received_at, id, source, ordering_key FROM wharf_inbox_messages
				WHERE event_id LIKE 'stale_%' AND status = 'received' ORDER BY received_at, id LIMIT 50`)
			require.NoError(t, err)
			for rows.Next() {
				var id uuid.UUID
				var source, key string
				require.NoError(t, rows.Scan(&at, &id, &source, &key))
				ids = append(ids, id.String())
				sources = append(sources, source)
				keys = append(keys, key)
			}
			require.NoError(t, rows.Err())
			require.Len(t, ids, 50)
			ats := make([]time.Time, len(ids))
			for i := range ats {
				ats[i] = at
			}

			statements := []struct {
				name string
				most int64 // message rows it may read
				run  func(t *testing.T, tx pgx.Tx)
			}{
				{"InboxMessagesLockUnfinished", 2*50 + 30, func(t *testing.T, tx pgx.Tx) {
					locked, err := dbsqlc.New(tx).InboxMessagesLockUnfinished(ctx, dbsqlc.InboxMessagesLockUnfinishedParams{ReceivedAts: ats, Ids: ids})
					require.NoError(t, err)
					require.Len(t, locked, 50)
				}},
				{"InboxMessagesAwaitUnlocked", 2*50 + 30, func(t *testing.T, tx pgx.Tx) {
					require.NoError(t, dbsqlc.New(tx).InboxMessagesAwaitUnlocked(ctx, dbsqlc.InboxMessagesAwaitUnlockedParams{ReceivedAts: ats, Ids: ids}))
				}},
				{"InboxMessagesPark", 5 + 10, func(t *testing.T, tx pgx.Tx) {
					require.NoError(t, dbsqlc.New(tx).InboxMessagesPark(ctx, dbsqlc.InboxMessagesParkParams{Now: time.Now(), ReceivedAt: at, Ids: ids[:5]}))
				}},
				{"InboxMessageRequeue", 10, func(t *testing.T, tx pgx.Tx) {
					_, err := dbsqlc.New(tx).InboxMessageRequeue(ctx, dbsqlc.InboxMessageRequeueParams{JobID: 1, Now: time.Now(), ReceivedAt: at, ID: uuid.MustParse(ids[7])})
					require.NoError(t, err)
				}},
				{"InboxMessagesNextParked", 10, func(t *testing.T, tx pgx.Tx) {
					// As a batch's finish runs it.
					next, err := dbsqlc.New(pgxtx.GenericPlans{DBTX: tx}).InboxMessagesNextParked(ctx, dbsqlc.InboxMessagesNextParkedParams{ReceivedAt: at, Sources: sources, Ids: ids, OrderingKeys: keys})
					require.NoError(t, err)
					require.Empty(t, next, "none is parked")
				}},
				{"InboxMessageNextWaiting (a finished message's wake of the next)", 10, func(t *testing.T, tx pgx.Tx) {
					k := 0
					for keys[k] == "" {
						k++
					}
					msg := &inbox.Message{ID: uuid.MustParse(ids[k]), Source: sources[k], ReceivedAt: at, OrderingKey: keys[k]}
					require.NoError(t, inbox.WakeNext(ctx, b.inbox, tx, msg))
				}},
				// A probe per key that it is unfinished, and one per deleted
				// key that its message is a skipped late arrival.
				{"RetentionInboxKeysDelete", 2*100 + 30, func(t *testing.T, tx pgx.Tx) {
					deleted, err := dbsqlc.New(tx).RetentionInboxKeysDelete(ctx, dbsqlc.RetentionInboxKeysDeleteParams{
						Cutoff: time.Now().Add(48 * time.Hour), ErasedCutoff: time.Now().Add(48 * time.Hour), BatchSize: 100,
					})
					require.NoError(t, err)
					require.Equal(t, int64(100), deleted, "the keys of processed messages")
				}},
			}
			for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
				t.Run(mode, func(t *testing.T) {
					for _, st := range statements {
						tx, err := b.pool.Begin(ctx)
						require.NoError(t, err)
						_, err = tx.Exec(ctx, "SELECT set_config('plan_cache_mode', $1, true)", mode)
						require.NoError(t, err)
						before := testdb.RowsRead(t, tx, "wharf_inbox_messages%")
						st.run(t, tx)
						assert.LessOrEqual(t, testdb.RowsRead(t, tx, "wharf_inbox_messages%")-before, st.most, "%s: message rows read, with %d unfinished", st.name, staleBacklog)
						require.NoError(t, tx.Rollback(ctx))
					}
				})
			}
		})
	}
}
