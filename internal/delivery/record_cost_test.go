package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/admission"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/testdb"
)

// TestRecordSucceededReadsOnlyItsDeliveries records a batch of successes
// of an endpoint (combineMax of them, the most one statement records) on a
// backlog whose statistics lag (see backlogPlans), and counts the delivery
// rows the statement read. It read the whole backlog: first because its
// plan read the endpoint's index of unfinished deliveries by endpoint, then
// through the partial index of unfinished deliveries (statistics taken
// while all had succeeded) or, on a backlog of 3,000, the endpoint's index
// by status alone (none taken, custom plan; the three attempts this test
// once recorded went through the primary key). A record reads each delivery it records twice
// (to lock it, to update it), and a few more rows at most.
func TestRecordSucceededReadsOnlyItsDeliveries(t *testing.T) {
	t.Parallel()
	backlogPlans(t, func(t *testing.T, e *Engine, tx pgx.Tx, rows []*outboxtype.Delivery, fetched func() int64) {
		ctx := context.Background()
		params := make([]*dbsqlc.OutboxAttemptRecordParams, combineMax)
		group := make([]int, len(params))
		for i := range params {
			params[i] = combineParams(t, e, rows[i*len(rows)/combineMax], admission.NoSlot, true)
			group[i] = i
		}
		before := fetched()
		recorded, err := dbsqlc.New(tx).OutboxAttemptRecordSucceeded(ctx, succeededArg(params, group))
		require.NoError(t, err)
		require.Len(t, recorded, len(params))
		require.Less(t, fetched()-before, int64(2*len(params)+30), "delivery rows read to record %d attempts, with %d unfinished", len(params), len(rows))
		var pending int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM wharf_outbox_deliveries WHERE status = 'pending'`).Scan(&pending))
		require.Equal(t, len(rows)-len(params), pending)
	})
}

// TestHandOverReadsOnlyItsDeliveries hands a batch job's deliveries
// (combineMax of them) over to new jobs, as a split does, on a backlog
// whose statistics lag (see backlogPlans), and counts the delivery rows
// the statement read: those it moves, a few more at most. On statistics
// taken while every delivery had succeeded, both plans read every
// unfinished delivery through the partial index of unfinished deliveries.
func TestHandOverReadsOnlyItsDeliveries(t *testing.T) {
	t.Parallel()
	backlogPlans(t, func(t *testing.T, _ *Engine, tx pgx.Tx, rows []*outboxtype.Delivery, fetched func() int64) {
		arg := dbsqlc.OutboxDeliveryHandOverParams{Now: time.Now()}
		for i := range combineMax {
			row := rows[i*len(rows)/combineMax]
			arg.Ids = append(arg.Ids, row.ID.String())
			arg.Generations = append(arg.Generations, row.Generation)
		}
		before := fetched()
		moved, err := dbsqlc.New(tx).OutboxDeliveryHandOver(context.Background(), arg)
		require.NoError(t, err)
		require.Len(t, moved, combineMax)
		require.Less(t, fetched()-before, int64(combineMax+30), "delivery rows read to hand %d over, with %d unfinished", combineMax, len(rows))
	})
}

// TestDeliveryStatementsReadOnlyTheirDelivery runs each statement that
// finds one delivery by id and checks its status (a lone delivery's
// record, a dead-lettering, a rate limit turn, a replay) on a backlog whose
// statistics lag (see backlogPlans), and counts the delivery rows it read.
// On statistics taken while every delivery had succeeded, the first three
// read every unfinished delivery through the partial index of unfinished
// deliveries (whose predicate their status condition proved) rather than
// one through the primary key: 9–11 ms for a lone record on a backlog of
// 30,000. The replay's condition proves no such predicate; it is checked
// as the others are.
func TestDeliveryStatementsReadOnlyTheirDelivery(t *testing.T) {
	t.Parallel()
	statements := map[string]func(t *testing.T, e *Engine, q *dbsqlc.Queries, row *outboxtype.Delivery){
		"OutboxAttemptRecord": func(t *testing.T, e *Engine, q *dbsqlc.Queries, row *outboxtype.Delivery) {
			results := q.OutboxAttemptRecord(context.Background(), []dbsqlc.OutboxAttemptRecordParams{*combineParams(t, e, row, admission.NoSlot, true)})
			recorded := 0
			results.QueryRow(func(_ int, _ dbsqlc.OutboxAttemptRecordRow, err error) {
				require.NoError(t, err)
				recorded++
			})
			require.NoError(t, results.Close())
			require.Equal(t, 1, recorded)
		},
		"OutboxDeliveryMarkDead": func(t *testing.T, _ *Engine, q *dbsqlc.Queries, row *outboxtype.Delivery) {
			_, err := q.OutboxDeliveryMarkDead(context.Background(), dbsqlc.OutboxDeliveryMarkDeadParams{
				Reason: "test", Now: time.Now(), ID: row.ID, Generation: row.Generation,
			})
			require.NoError(t, err)
		},
		"OutboxDeliveryThrottle": func(t *testing.T, _ *Engine, q *dbsqlc.Queries, row *outboxtype.Delivery) {
			n, err := q.OutboxDeliveryThrottle(context.Background(), dbsqlc.OutboxDeliveryThrottleParams{
				TurnInSeconds: 1, ID: row.ID, Generation: row.Generation,
			})
			require.NoError(t, err)
			require.Equal(t, int64(1), n)
		},
		"OutboxDeliveryRequeue": func(t *testing.T, _ *Engine, q *dbsqlc.Queries, row *outboxtype.Delivery) {
			generation, err := q.OutboxDeliveryRequeue(context.Background(), dbsqlc.OutboxDeliveryRequeueParams{
				Now: time.Now(), ID: row.ID, OrphanedGeneration: &row.Generation,
			})
			require.NoError(t, err)
			require.Equal(t, row.Generation+1, generation)
		},
	}
	backlogPlans(t, func(t *testing.T, e *Engine, tx pgx.Tx, rows []*outboxtype.Delivery, fetched func() int64) {
		i := 0
		for name, run := range statements {
			i++
			before := fetched()
			run(t, e, dbsqlc.New(tx), rows[i*len(rows)/(len(statements)+1)])
			assert.Less(t, fetched()-before, int64(10), "%s: delivery rows read for one, with %d unfinished", name, len(rows))
		}
	})
}

// backlogSize is the backlog of backlogPlans: on a few thousand rows a
// sequential scan is the planner's fair choice, and reads them all.
const backlogSize = 30000

// backlogPlans runs check, in a transaction rolled back afterwards, on an
// endpoint's backlog of backlogSize unfinished deliveries whose statistics
// say almost none is unfinished: not taken yet (published just now: a
// burst), or taken while every delivery had succeeded (a backlog after an
// outage). Each runs under a generic and a custom plan. check gets the
// deliveries and a function returning how many delivery rows the
// transaction has read so far, through indexes or sequential scans.
func backlogPlans(t *testing.T, check func(t *testing.T, e *Engine, tx pgx.Tx, rows []*outboxtype.Delivery, fetched func() int64)) {
	for _, stats := range []string{"never_analyzed", "analyzed_all_succeeded"} {
		t.Run(stats, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e, pool, _, rows := combineSetup(t, []int32{100}, backlogSize)
			if stats == "analyzed_all_succeeded" {
				for _, stmt := range []string{
					`UPDATE wharf_outbox_deliveries SET status = 'succeeded'`,
					`ANALYZE wharf_outbox_deliveries`,
					`UPDATE wharf_outbox_deliveries SET status = 'pending'`,
				} {
					_, err := pool.Exec(ctx, stmt)
					require.NoError(t, err)
				}
			}
			for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
				t.Run(mode, func(t *testing.T) {
					tx, err := pool.Begin(ctx)
					require.NoError(t, err)
					defer func() { _ = tx.Rollback(ctx) }()
					_, err = tx.Exec(ctx, "SELECT set_config('plan_cache_mode', $1, true)", mode)
					require.NoError(t, err)
					check(t, e, tx, rows, func() int64 { return testdb.RowsRead(t, tx, "wharf_outbox_deliveries") })
				})
			}
		})
	}
}
