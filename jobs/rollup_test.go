package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/jobs"
)

// The rollups count each ended hour once, per source and per endpoint and
// outcome, move their watermarks, leave the hour in progress (and the lag
// after an hour) to live counting, and count the same when run again,
// concurrently or over hours already counted.
func TestRollupCountsEndedHours(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	// Messages in today's partition at 00:10 (a), 01:20 (a, a, b) and 23:58
	// (a, a); the clock says tomorrow 00:03, so 23:xx is within the lag.
	day := time.Now().UTC().Truncate(24 * time.Hour)
	for i, m := range []struct {
		source string
		at     time.Duration
	}{
		{"a", 10 * time.Minute}, {"a", 80 * time.Minute}, {"a", 81 * time.Minute}, {"b", 82 * time.Minute},
		{"a", 23*time.Hour + 58*time.Minute}, {"a", 23*time.Hour + 59*time.Minute},
	} {
		_, err := pool.Exec(ctx, `INSERT INTO wharf_inbox_messages (id, received_at, source, event_id, body, payload_hash, updated_at)
			VALUES (gen_random_uuid(), $1, $2, 'evt_' || $3::int, '', '', now())`, day.Add(m.at), m.source, i)
		require.NoError(t, err)
	}
	// Delivery attempts to endpoints …e1 and …e2 at 00:10, 01:20 (each
	// outcome) and 23:51 and 23:58, within the attempts' longer lag (an
	// attempt is recorded when its request ends) until 00:10.
	for _, a := range []struct {
		endpoint string
		at       time.Duration
		code     *int
	}{
		{"e1", 10 * time.Minute, ptr(200)},
		{"e1", 80 * time.Minute, ptr(204)}, {"e1", 80 * time.Minute, ptr(302)}, {"e1", 80 * time.Minute, ptr(410)},
		{"e1", 81 * time.Minute, ptr(503)}, {"e1", 81 * time.Minute, nil}, {"e1", 81 * time.Minute, ptr(600)},
		{"e2", 82 * time.Minute, nil}, {"e2", 82 * time.Minute, nil},
		{"e1", 23*time.Hour + 51*time.Minute, ptr(200)}, {"e2", 23*time.Hour + 58*time.Minute, ptr(500)},
	} {
		_, err := pool.Exec(ctx, `INSERT INTO wharf_outbox_attempts (id, attempted_at, delivery_id, endpoint_id, event_id, attempt, status, status_code, duration_us)
			VALUES (gen_random_uuid(), $1, gen_random_uuid(), ('00000000-0000-0000-0000-0000000000' || $2)::uuid, gen_random_uuid(), 1,
			        CASE WHEN $3::int BETWEEN 200 AND 299 THEN 'succeeded' ELSE 'failed' END, $3, 1000)`, day.Add(a.at), a.endpoint, a.code)
		require.NoError(t, err)
	}
	now := day.Add(24*time.Hour + 3*time.Minute)
	m, err := jobs.NewMaintainer(pool, &jobs.Config{Now: func() time.Time { return now }})
	require.NoError(t, err)

	counts := func(sql string) map[string]int64 {
		rows, err := pool.Query(ctx, sql)
		require.NoError(t, err)
		defer rows.Close()
		out := map[string]int64{}
		for rows.Next() {
			var k string
			var n int64
			require.NoError(t, rows.Scan(&k, &n))
			out[k] = n
		}
		require.NoError(t, rows.Err())
		return out
	}
	inboxCounts := func() map[string]int64 {
		return counts("SELECT to_char(hour AT TIME ZONE 'UTC', 'HH24') || source, received FROM wharf_inbox_hourly")
	}
	attemptCounts := func() map[string]int64 {
		return counts(`SELECT to_char(hour AT TIME ZONE 'UTC', 'HH24') || ' ' || right(endpoint_id::text, 2) || ' ' || outcome, attempts
			FROM wharf_outbox_attempts_hourly`)
	}
	early := map[string]int64{
		"00 e1 2xx": 1,
		"01 e1 2xx": 1, "01 e1 3xx": 1, "01 e1 4xx": 1, "01 e1 5xx": 1, "01 e1 no answer": 1, "01 e1 other": 1,
		"01 e2 no answer": 2,
	}
	res, err := m.Rollup(ctx)
	require.NoError(t, err)
	require.Equal(t, day.Add(23*time.Hour), res.Inbox.Until, "23:00 has not ended RollupLag ago")
	require.Equal(t, res.Inbox.Until.Add(-jobs.RollupKept), res.Inbox.From, "a first run counts RollupKept back")
	require.Equal(t, map[string]int64{"00a": 1, "01a": 2, "01b": 1}, inboxCounts())
	require.Equal(t, day.Add(23*time.Hour), res.Attempts.Until)
	require.Equal(t, res.Attempts.Until.Add(-jobs.RollupKept), res.Attempts.From, "a first run counts RollupKept back")
	require.Equal(t, early, attemptCounts())

	// At 00:08, twice at once: 23:xx's messages are counted, the same by
	// both runs; its attempts are still within their lag.
	runTwiceAtOnce := func() {
		errs := make(chan error, 2)
		for range 2 {
			go func() { _, err := m.Rollup(ctx); errs <- err }()
		}
		require.NoError(t, <-errs)
		require.NoError(t, <-errs)
	}
	now = now.Add(5 * time.Minute)
	runTwiceAtOnce()
	require.Equal(t, map[string]int64{"00a": 1, "01a": 2, "01b": 1, "23a": 2}, inboxCounts())
	require.Equal(t, early, attemptCounts())

	// At 00:13, twice at once: 23:xx's attempts are counted.
	now = now.Add(5 * time.Minute)
	runTwiceAtOnce()
	all := map[string]int64{"23 e1 2xx": 1, "23 e2 5xx": 1}
	for k, n := range early {
		all[k] = n
	}
	require.Equal(t, all, attemptCounts())
	res, err = m.Rollup(ctx)
	require.NoError(t, err)
	require.Equal(t, res.Inbox.From, res.Inbox.Until, "nothing new to count")
	require.Equal(t, res.Attempts.From, res.Attempts.Until, "nothing new to count")
	require.Equal(t, day.Add(24*time.Hour), res.Attempts.Until)

	// Counting hours again (the watermarks moved back a day) writes the
	// same counts, not twice them.
	_, err = pool.Exec(ctx, "UPDATE wharf_rollups SET until = until - interval '1 day'")
	require.NoError(t, err)
	res, err = m.Rollup(ctx)
	require.NoError(t, err)
	require.Equal(t, 24*time.Hour, res.Attempts.Until.Sub(res.Attempts.From))
	require.Equal(t, map[string]int64{"00a": 1, "01a": 2, "01b": 1, "23a": 2}, inboxCounts())
	require.Equal(t, all, attemptCounts())

	// Hours older than RollupKept go.
	now = now.Add(jobs.RollupKept + time.Hour)
	res, err = m.Rollup(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4, res.Inbox.Pruned)
	require.EqualValues(t, len(all), res.Attempts.Pruned)
	require.Empty(t, inboxCounts())
	require.Empty(t, attemptCounts())
}

func ptr[T any](v T) *T { return &v }
