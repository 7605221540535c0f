package inbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
)

// TestWorkerStatementsUseGenericPlans: the workers' statements on the
// day-partitioned messages (loading a batch or a lone message, a
// BatchHandler's processed mark, the bulk mark of messages whose handlers
// never touched the database, a lone message's mark) and River's job
// completion in their transactions run with generic plans. Postgres
// otherwise made a custom plan for each execution, which took as long as
// running the statement (River's: twice as long).
func TestWorkerStatementsUseGenericPlans(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	createEffects(t, b.pool)
	b.inbox.HandleBatch("payments", "paid", func(ctx context.Context, tx pgx.Tx, msgs []*inbox.Message) error {
		for _, m := range msgs {
			if err := applyEffect(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	})
	b.inbox.Handle("payments", "noted", func(context.Context, pgx.Tx, *inbox.Message) error { return nil })
	for i := range 3 {
		batch := typedPayments("paid", "paid", "noted", "noted")
		for j := range batch {
			batch[j].EventID += "_" + string(rune('a'+i))
		}
		receiveMany(t, b.pool, b.inbox, batch)
		// A batch of one gets a job of its own (the per-message worker).
		lone := typedPayments("paid")
		lone[0].EventID = "lone_" + string(rune('a'+i))
		receiveMany(t, b.pool, b.inbox, lone)
	}
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed)

	// River's completion statement, which JobCompleteTx sends once per job
	// (six here) and River's completer now and then: without Wharf's
	// generic plans, Postgres makes custom plans for a statement's first
	// five executions on a connection. The counts are read from the idle
	// connections, so a busy one (River polling) is awaited.
	names := []string{"InboxMessagesGetForUpdate", "InboxMessagesMarkProcessed", "InboxMessageGetForUpdate", "InboxMessageMarkProcessed"}
	ready := func(plans map[string]planCounts) bool {
		for _, name := range names {
			if plans[name].generic == 0 {
				return false
			}
		}
		return plans["JobSetStateIfRunningMany"].generic >= 6
	}
	plans := preparedPlans(t, b.pool)
	for deadline := time.Now().Add(10 * time.Second); !ready(plans) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // polling the connections
		plans = preparedPlans(t, b.pool)
	}
	require.GreaterOrEqual(t, plans["JobSetStateIfRunningMany"].generic, int64(6), "River's job completion: %+v", plans["JobSetStateIfRunningMany"])
	require.Zero(t, plans["JobSetStateIfRunningMany"].custom, "River's job completion sent by Wharf ran with custom plans")
	for _, name := range names {
		p := plans[name]
		require.Positive(t, p.generic, "%s never ran with a generic plan", name)
		require.Zero(t, p.custom, "%s ran with custom plans", name)
	}
}

type planCounts struct{ generic, custom int64 }

// preparedPlans sums, over the pool's idle connections, the generic and
// custom plans of the prepared statements Wharf sent with a generic plan
// (their text prefixed), by the sqlc name that follows the prefix.
func preparedPlans(t *testing.T, pool *pgxpool.Pool) map[string]planCounts {
	t.Helper()
	ctx := context.Background()
	conns := pool.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	plans := map[string]planCounts{}
	for _, c := range conns {
		rows, err := c.Query(ctx, "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
		require.NoError(t, err)
		for rows.Next() {
			var stmt string
			var p planCounts
			require.NoError(t, rows.Scan(&stmt, &p.generic, &p.custom))
			// Statements sent with a generic plan are prepared apart,
			// their text prefixed (see pgxtx.GenericPlans); River's own
			// are not counted.
			name, ok := strings.CutPrefix(stmt, "/* wharf: generic plan */ -- name: ")
			if !ok {
				continue
			}
			name, _, _ = strings.Cut(name, " ")
			sum := plans[name]
			plans[name] = planCounts{sum.generic + p.generic, sum.custom + p.custom}
		}
		require.NoError(t, rows.Err())
	}
	return plans
}
