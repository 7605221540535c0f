package inbox_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testdb"
)

// pollOnly is the River setting a client behind PgBouncer in transaction
// mode needs: LISTEN does not survive transaction pooling.
func pollOnly(cfg *river.Config) { cfg.PollOnly = true }

// TestDuplicateStormThroughPgBouncer: 30 events, each sent 8 times at once
// (half the copies with another payload), received with group commit and
// processed at the same time by a poll-only River client, all through
// PgBouncer in transaction mode: every event is accepted once, the others
// are answered duplicate, and each effect is applied exactly once.
func TestDuplicateStormThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range testdb.Modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			pool, _ := testdb.NewPooled(t, mode)
			createEffects(t, pool)
			b := setup(t, &setupOpts{pool: pool, cfg: &inbox.Config{BatchSize: 16, BatchWait: 20 * time.Millisecond}})
			b.inbox.Handle("payments", inbox.Wildcard, applyEffect)
			b.startWorkersWith(t, pollOnly)

			const events, copies = 30, 8
			var reqs []*http.Request
			for c := range copies {
				for e := range events {
					body := fmt.Appendf(nil, `{"type":"payment.succeeded","copy":%d}`, c%2)
					reqs = append(reqs, b.signed(t, "payments", fmt.Sprintf("evt_%d", e), body, time.Now()))
				}
			}
			accepted := map[string]int{}
			for _, a := range sendAll(t, reqs) {
				require.Equal(t, http.StatusOK, a.Status, a.RawBody)
				if a.Body["status"] == "accepted" {
					accepted[a.Body["event_id"].(string)]++
				} else {
					require.Equal(t, "duplicate", a.Body["status"], a.RawBody)
				}
			}
			require.Len(t, accepted, events)
			for id, n := range accepted {
				require.Equal(t, 1, n, id)
			}

			awaitSettled(t, pool, inbox.StatusProcessed)
			for e := range events {
				require.Equal(t, 1, effectCount(t, pool, fmt.Sprintf("evt_%d", e)))
			}
			keys, messages, _ := b.counts(t)
			require.Equal(t, []int{events, events}, []int{keys, messages})
		})
	}
}

// TestWorkerKilledThroughPgBouncer: a worker process connected through
// PgBouncer in transaction mode is killed with SIGKILL inside its handler
// (the effect written, not committed). PgBouncer must drop the server
// connection of the dead client's open transaction, so its locks go and
// nothing commits; a fresh poll-only worker, also through PgBouncer,
// rescues the job and applies each effect exactly once.
func TestWorkerKilledThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range testdb.Modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			pool, url := testdb.NewPooled(t, mode)
			killMidHandler(t, pool, url, []string{"msg_pooled_1", "msg_pooled_2", "msg_pooled_3"}, true)
		})
	}
}
