package dashboard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/jobs"
)

// endpointHealth counts the same attempts from the rollup as live, for a
// window starting on the hour or within one (the endpoints page's window
// ends now), before, at and after the rollup's watermark; once the rollup
// ran, the hours it covers are read from it.
func TestEndpointHealthSameWithRollup(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	h, err := New(pool, nil)
	require.NoError(t, err)
	// Yesterday, whose partition every test database has.
	day := time.Now().UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour)
	at := func(hhmm string) time.Time {
		var hh, mm int
		_, err := fmt.Sscanf(hhmm, "%d:%d", &hh, &mm)
		require.NoError(t, err)
		return day.Add(time.Duration(hh)*time.Hour + time.Duration(mm)*time.Minute)
	}
	for i, a := range []struct {
		at   string
		code *int
	}{
		{"09:50", ptr(200)}, {"10:10", ptr(200)}, {"10:40", ptr(503)}, {"10:45", nil}, {"11:20", ptr(200)},
		{"11:59", ptr(302)}, {"12:50", ptr(404)}, {"13:05", ptr(600)}, {"13:59", ptr(200)}, {"14:05", ptr(500)},
		{"14:25", ptr(200)},
	} {
		_, err := pool.Exec(ctx, `INSERT INTO wharf_outbox_attempts (id, attempted_at, delivery_id, endpoint_id, event_id, attempt, status, status_code, duration_us)
			VALUES (gen_random_uuid(), $1, gen_random_uuid(), ('00000000-0000-0000-0000-0000000000e' || $2::int % 2)::uuid, gen_random_uuid(), 1,
			        CASE WHEN $3::int BETWEEN 200 AND 299 THEN 'succeeded' ELSE 'failed' END, $3, 1000)`, at(a.at), i, a.code)
		require.NoError(t, err)
	}
	sinces := []time.Time{at("09:00"), at("10:00"), at("10:30"), at("11:00"), at("11:59").Add(59 * time.Second),
		at("13:30"), at("14:00"), at("14:10"), at("15:00")}
	type health struct {
		Attempts, Succeeded map[string]int64
		PerOutcome          map[string][]int64
	}
	read := func(since time.Time) health {
		byID, perOutcome, err := h.endpointHealth(ctx, since)
		require.NoError(t, err)
		out := health{Attempts: map[string]int64{}, Succeeded: map[string]int64{}, PerOutcome: map[string][]int64{}}
		for id, e := range byID {
			out.Attempts[id.String()], out.Succeeded[id.String()] = e.Attempts, e.Succeeded
			out.PerOutcome[id.String()] = perOutcome[id]
		}
		return out
	}
	live := map[time.Time]health{}
	for _, since := range sinces {
		live[since] = read(since)
	}
	e0, e1 := "00000000-0000-0000-0000-0000000000e0", "00000000-0000-0000-0000-0000000000e1"
	require.Equal(t, map[string]int64{e0: 5, e1: 4}, live[at("10:30")].Attempts)
	require.Equal(t, map[string][]int64{e0: {3, 0, 1, 1, 0, 0}, e1: {0, 1, 0, 1, 1, 1}}, live[at("10:30")].PerOutcome,
		"2xx, 3xx, 4xx, 5xx, no answer, other")

	// The rollup at 14:30 counts the attempts before 14:00.
	m, err := jobs.NewMaintainer(pool, &jobs.Config{Now: func() time.Time { return at("14:30") }})
	require.NoError(t, err)
	res, err := m.Rollup(ctx)
	require.NoError(t, err)
	require.Equal(t, at("14:00"), res.Attempts.Until)
	for _, since := range sinces {
		require.Equal(t, live[since], read(since), "since %s", since.Format(time.TimeOnly))
	}

	// Those hours are read from the rollup: without their attempts, the
	// windows from 10:30 and 11:00 count the same (10:30's start of hour
	// is still counted live).
	_, err = pool.Exec(ctx, "DELETE FROM wharf_outbox_attempts WHERE attempted_at >= $1 AND attempted_at < $2", at("11:00"), at("14:00"))
	require.NoError(t, err)
	require.Equal(t, live[at("10:30")], read(at("10:30")))
	require.Equal(t, live[at("11:00")], read(at("11:00")))
}

func ptr[T any](v T) *T { return &v }
