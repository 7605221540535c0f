package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/partition"
	"github.com/wharfhq/wharf/internal/testclock"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/jobs"
)

// TestPeriodicJobsThroughPgBouncer: upkeep and prune, registered in a
// poll-only River client whose pool goes through PgBouncer in transaction
// mode, run on start and do their work (prune, 40 days on, drops the
// partitions Migrate made); prunes run again afterwards find nothing to do
// and do not wait for a lock a run left behind.
func TestPeriodicJobsThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range testdb.Modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, _ := testdb.NewPooled(t, mode)
			clk := testclock.New(time.Now().AddDate(0, 0, 40))
			cfg := &jobs.Config{Logger: quiet, Now: clk.Now}
			outputs := runPeriodicJobs(t, pool, cfg, func(c *river.Config) { c.PollOnly = true })
			require.Contains(t, outputs["wharf_partition_upkeep"], partition.Name("wharf_inbox_messages", clk.Now().AddDate(0, 0, 7)))
			var pruned jobs.PruneResult
			require.NoError(t, json.Unmarshal([]byte(outputs["wharf_prune"]), &pruned))
			require.Contains(t, pruned.Dropped, partition.Name("wharf_inbox_messages", time.Now()))

			maint, err := jobs.NewMaintainer(pool, cfg)
			require.NoError(t, err)
			for range 3 {
				runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
				res, err := maint.Prune(runCtx, nil)
				cancel()
				require.NoError(t, err)
				require.Empty(t, res.Dropped)
			}
		})
	}
}

// TestConcurrentPrunesThroughPgBouncer: three prunes and three upkeeps at
// once through PgBouncer in transaction mode, where session locks would
// neither exclude each other nor be released: all succeed, each expired
// partition is dropped once, and afterwards a replay (which takes the
// retention lock shared) and another prune go through at once.
func TestConcurrentPrunesThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range testdb.Modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			pool, _ := testdb.NewPooled(t, mode)
			b := setupOn(t, pool, nil)
			b.pollOnly = true
			b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(_ context.Context, _ pgx.Tx, msg *inbox.Message) error {
				if msg.EventID == "dead" {
					return inbox.Permanent(errors.New("unknown account"))
				}
				return nil
			})
			b.startWorkers(t)

			// 35 days of one processed message each, created at their day.
			const lastDay = 34
			start := partition.Day(time.Now())
			for d := range lastDay + 1 {
				b.clock.Set(start.AddDate(0, 0, d).Add(time.Hour))
				b.receive(t, "s", fmt.Sprint(d))
				b.awaitJobs(t, 1)
			}
			dead := b.receive(t, "s", "dead")
			b.awaitJobs(t, 1)

			var wg sync.WaitGroup
			const runs = 3
			results := make([]*jobs.PruneResult, runs)
			errs := make([]error, 2*runs)
			for i := range runs {
				m, err := jobs.NewMaintainer(b.pool, &jobs.Config{Now: b.clock.Now, Logger: quiet})
				require.NoError(t, err)
				wg.Add(2)
				go func() { defer wg.Done(); results[i], errs[i] = m.Prune(ctx, nil) }()
				go func() { defer wg.Done(); _, errs[runs+i] = m.Upkeep(ctx) }()
			}
			wg.Wait()
			for _, err := range errs {
				require.NoError(t, err)
			}
			seen := map[string]bool{}
			var inboxDropped []string
			for _, res := range results {
				for _, name := range res.Dropped {
					require.False(t, seen[name], "%s dropped twice", name)
					seen[name] = true
					if strings.HasPrefix(name, "wharf_inbox_messages_p") {
						inboxDropped = append(inboxDropped, name)
					}
				}
			}
			// On day 34, 30 days of retention expire days -1 … 3.
			require.Len(t, inboxDropped, 5, "%v", inboxDropped)
			today := start.AddDate(0, 0, lastDay)
			require.Equal(t, today.AddDate(0, 0, -30), b.partitionDays(t, "wharf_inbox_messages")[0])

			require.NoError(t, b.inbox.Replay(ctx, dead.MessageID), "no retention lock left behind")
			res, err := b.maint.Prune(ctx, nil)
			require.NoError(t, err)
			require.Empty(t, res.Dropped)
		})
	}
}
