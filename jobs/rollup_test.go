package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/jobs"
)

// The rollup counts each ended hour once, per source, moves its watermark,
// leaves the hour in progress (and the lag after an hour) to live counting,
// and counts the same when run again or concurrently.
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
	now := day.Add(24*time.Hour + 3*time.Minute)
	m, err := jobs.NewMaintainer(pool, &jobs.Config{Now: func() time.Time { return now }})
	require.NoError(t, err)

	counts := func() map[string]int64 {
		rows, err := pool.Query(ctx, "SELECT to_char(hour AT TIME ZONE 'UTC', 'HH24') || source, received FROM wharf_inbox_hourly")
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
	res, err := m.Rollup(ctx)
	require.NoError(t, err)
	require.Equal(t, day.Add(23*time.Hour), res.Until, "23:00 has not ended RollupLag ago")
	require.Equal(t, res.Until.Add(-jobs.RollupKept), res.From, "a first run counts RollupKept back")
	require.Equal(t, map[string]int64{"00a": 1, "01a": 2, "01b": 1}, counts())

	// Later: 23:xx is counted, and a run twice at once counts the same.
	now = now.Add(10 * time.Minute)
	errs := make(chan error, 2)
	for range 2 {
		go func() { _, err := m.Rollup(ctx); errs <- err }()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	require.Equal(t, map[string]int64{"00a": 1, "01a": 2, "01b": 1, "23a": 2}, counts())
	res, err = m.Rollup(ctx)
	require.NoError(t, err)
	require.Equal(t, res.From, res.Until, "nothing new to count")

	// Hours older than RollupKept go.
	now = now.Add(jobs.RollupKept + time.Hour)
	res, err = m.Rollup(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4, res.Pruned)
	require.Empty(t, counts())
}
