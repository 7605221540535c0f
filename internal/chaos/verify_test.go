package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
)

// tally is what the database says about the events sent.
type tally struct {
	sent, acknowledged, processed int
	// doubled counts events applied more than once: two message rows, a
	// balance above the event's amount, or two balance.updated events.
	doubled int
	// lost counts acknowledged events without a dedupe key, a processed
	// message, their balance or their balance.updated event.
	lost       int
	examples   []string // a few doubled or lost events, for the failure message
	strays     []string // balances no event explains
	sumBalance int64    // sum of every balance
	sumApplied int64    // sum of the amounts of events with a message
}

// countEffects compares the database with the events sent.
func countEffects(t testing.TB, pool *pgxpool.Pool, events []event, s *sender) *tally {
	t.Helper()
	ctx := context.Background()
	type msgCount struct{ rows, processed int }
	messages := map[string]msgCount{}
	rows, err := pool.Query(ctx, `SELECT event_id, count(*), count(*) FILTER (WHERE status = 'processed')
		FROM wharf_inbox_messages WHERE source = 'payments' GROUP BY event_id`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		var c msgCount
		require.NoError(t, rows.Scan(&id, &c.rows, &c.processed))
		messages[id] = c
	}
	require.NoError(t, rows.Err())
	keys := queryCounts(t, pool, `SELECT event_id, 1 FROM wharf_inbox_keys WHERE source = 'payments'`)
	balances := queryCounts(t, pool, `SELECT account, balance FROM example_balances`)
	published := queryCounts(t, pool, `SELECT convert_from(payload, 'UTF8')::jsonb #>> '{data,account}', count(*)
		FROM wharf_outbox_events WHERE type = 'balance.updated' GROUP BY 1`)

	tl := &tally{sent: len(events)}
	known := map[string]bool{}
	for _, ev := range events {
		known[ev.account] = true
		m, bal, pub := messages[ev.id], balances[ev.account], published[ev.account]
		acked := s.isAcked(ev.id)
		if acked {
			tl.acknowledged++
		}
		if m.rows > 0 {
			tl.sumApplied += ev.amount
		}
		if m.processed > 0 && bal == ev.amount && pub == 1 {
			tl.processed++
		}
		switch {
		case m.rows > 1 || bal > ev.amount || pub > 1:
			tl.doubled++
			tl.note(fmt.Sprintf("doubled %s: %d messages, balance %d for amount %d, %d balance.updated", ev.id, m.rows, bal, ev.amount, pub))
		case acked && (keys[ev.id] == 0 || m.processed == 0 || bal != ev.amount || pub != 1):
			tl.lost++
			tl.note(fmt.Sprintf("lost %s (acknowledged): key %v, %d processed of %d messages, balance %d for amount %d, %d balance.updated",
				ev.id, keys[ev.id] == 1, m.processed, m.rows, bal, ev.amount, pub))
		}
	}
	for account, bal := range balances {
		tl.sumBalance += bal
		if !known[account] {
			tl.strays = append(tl.strays, fmt.Sprintf("%s=%d", account, bal))
		}
	}
	return tl
}

func (tl *tally) note(s string) {
	if len(tl.examples) < 10 {
		tl.examples = append(tl.examples, s)
	}
}

// require fails the test unless every acknowledged event was applied
// exactly once and every event was acknowledged.
func (tl *tally) require(t testing.TB) {
	t.Helper()
	require.Zero(t, tl.doubled, "events applied more than once: %v", tl.examples)
	require.Zero(t, tl.lost, "acknowledged events lost: %v", tl.examples)
	require.Empty(t, tl.strays, "balances of no event sent")
	require.Equal(t, tl.sumApplied, tl.sumBalance, "the balances must sum to the amounts of the distinct events received")
	require.Equal(t, tl.sent, tl.acknowledged, "every event must be acknowledged in the end: senders retry across nodes")
	require.Equal(t, tl.acknowledged, tl.processed)
}

// queryCounts runs a query of (text, bigint) rows into a map.
func queryCounts(t testing.TB, pool *pgxpool.Pool, sql string) map[string]int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), sql)
	require.NoError(t, err)
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var v int64
		require.NoError(t, rows.Scan(&k, &v))
		out[k] = v
	}
	require.NoError(t, rows.Err())
	return out
}

// awaitSettled waits until every stored payment is processed and the inbox
// queue holds no unfinished job (a leftover job could still double an
// effect). Whether every acknowledged event was stored is countEffects'
// business: a 200 is only sent after the commit, so nothing more arrives.
// The inbox's periodic rescue job is not waited for: it only gives jobs to
// unfinished messages, of which none is left, and one orphaned by a killed
// node stays running until River rescues it after its 5-minute timeout (a
// CI run once met that).
func awaitSettled(t testing.TB, pool *pgxpool.Pool, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	var unprocessed, unfinished int
	for {
		err := pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM wharf_inbox_messages WHERE source = 'payments' AND status <> 'processed'),
			(SELECT count(*) FROM river_job WHERE queue = $1 AND kind <> 'wharf_inbox_rescue'
				AND state NOT IN ('completed', 'cancelled', 'discarded'))`,
			inbox.DefaultQueue).Scan(&unprocessed, &unfinished)
		if err == nil && unprocessed == 0 && unfinished == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled after %s: %d messages unprocessed, %d inbox jobs unfinished (%v)\n%s",
				timeout, unprocessed, unfinished, err, jobStates(t, pool))
		}
		time.Sleep(100 * time.Millisecond) // polling the database for progress
	}
}

// jobStates describes River's jobs by kind and state, for failure messages.
func jobStates(t testing.TB, pool *pgxpool.Pool) string {
	rows, err := pool.Query(context.Background(), `SELECT kind || '/' || state, count(*) FROM river_job GROUP BY 1 ORDER BY 1`)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for rows.Next() {
		var k string
		var n int64
		if rows.Scan(&k, &n) == nil {
			parts = append(parts, fmt.Sprintf("%s=%d", k, n))
		}
	}
	return "river jobs: " + strings.Join(parts, " ")
}

// leaderWatch samples River's leader table, recording every leadership
// term (a leader id and its election time) it sees.
type leaderWatch struct {
	mu    sync.Mutex
	terms []string
	seen  map[string]bool
	stop  chan struct{}
	done  chan struct{}
}

func watchLeaders(t testing.TB, pool *pgxpool.Pool) *leaderWatch {
	w := &leaderWatch{seen: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			var id string
			var elected time.Time
			err := pool.QueryRow(context.Background(), `SELECT leader_id, elected_at FROM river_leader`).Scan(&id, &elected)
			if err == nil {
				term := id + "@" + elected.UTC().Format(time.RFC3339Nano)
				w.mu.Lock()
				if !w.seen[term] {
					w.seen[term] = true
					w.terms = append(w.terms, term)
				}
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(w.close)
	return w
}

func (w *leaderWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// snapshot returns the terms seen so far, in order.
func (w *leaderWatch) snapshot() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.terms...)
}

func leaderOf(term string) string {
	id, _, _ := strings.Cut(term, "@")
	return id
}

// awaitLeader waits until a term led by someone other than former is seen.
func (w *leaderWatch) awaitLeaderOtherThan(t testing.TB, former string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, term := range w.snapshot() {
			if leaderOf(term) != former {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no node other than %s was elected leader within %s (terms seen: %v)", former, timeout, w.snapshot())
		}
		time.Sleep(100 * time.Millisecond) // polling the watch
	}
}

// periodicRuns counts River's periodic jobs by kind, and the distinct
// times they were scheduled for.
type periodicRuns map[string][2]int

func countPeriodic(t testing.TB, pool *pgxpool.Pool) periodicRuns {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT kind, count(*), count(DISTINCT scheduled_at)
		FROM river_job WHERE metadata->>'periodic' = 'true' GROUP BY kind`)
	require.NoError(t, err)
	got := periodicRuns{}
	for rows.Next() {
		var kind string
		var n, distinct int
		require.NoError(t, rows.Scan(&kind, &n, &distinct))
		got[kind] = [2]int{n, distinct}
	}
	require.NoError(t, rows.Err())
	return got
}

// require fails the test unless each of Wharf's periodic jobs ran, never
// twice for one scheduled time, and no more often than the leaders'
// run-on-start runs plus one per period elapsed. A periodic job enqueued
// by every node, not just the leader, would break the bound.
func (p periodicRuns) require(t testing.TB, terms int, elapsed, interval time.Duration) {
	t.Helper()
	bound := terms + int(elapsed/interval)
	for _, kind := range periodicKinds {
		n, distinct := p[kind][0], p[kind][1]
		require.GreaterOrEqual(t, n, 1, "%s never ran", kind)
		require.Equal(t, n, distinct, "%s: two periodic jobs for one scheduled time", kind)
		require.LessOrEqual(t, n, bound,
			"%s ran %d times in %s with %d leadership terms and a %s period: more than once per term or period", kind, n, elapsed, terms, interval)
	}
}

// periodicKinds are Wharf's periodic jobs every run must see.
var periodicKinds = []string{"wharf_partition_upkeep", "wharf_prune"}

// awaitPeriodic waits until each of periodicKinds has been enqueued; the
// failure of periodicRuns.require says which never was.
func awaitPeriodic(t testing.TB, pool *pgxpool.Pool, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p := countPeriodic(t, pool)
		all := true
		for _, kind := range periodicKinds {
			all = all && p[kind][0] >= 1
		}
		if all || time.Now().After(deadline) {
			return
		}
		time.Sleep(50 * time.Millisecond) // polling the job table
	}
}

func (p periodicRuns) String() string {
	counts := map[string]int{}
	for k, v := range p {
		counts[k] = v[0]
	}
	return formatCounts(counts)
}

// messageDays counts the days (UTC) the payments' messages were stored
// under: nodes whose clocks disagree about the date store one event's
// copies in different daily partitions, and dedupe must hold across them.
func messageDays(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	var days int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(DISTINCT (received_at AT TIME ZONE 'UTC')::date)
		FROM wharf_inbox_messages WHERE source = 'payments'`).Scan(&days))
	return days
}

func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s:%d", strings.TrimPrefix(k, "wharf_"), m[k]))
	}
	return strings.Join(parts, ",")
}
