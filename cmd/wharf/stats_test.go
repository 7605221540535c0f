package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/jobs"
)

// wharf stats counts received webhooks, duplicates blocked (and their
// ratio), processing outcomes and the most duplicated ids, per source and
// day.
func TestStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.NewURL(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	ib, err := inbox.New(pool, nil)
	require.NoError(t, err)
	receive := func(ids ...string) {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for _, id := range ids {
				if _, err := ib.ReceiveTx(ctx, tx, inbox.Incoming{Source: "stripe", EventID: id, Body: []byte(`{}`)}); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	receive("evt_1", "evt_2", "evt_3")
	receive("evt_1", "evt_1", "evt_2") // three duplicates blocked
	_, err = pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = 'processed' WHERE event_id IN ('evt_1', 'evt_2')")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = 'dead' WHERE event_id = 'evt_3'")
	require.NoError(t, err)

	// Delivery attempts to two endpoints, yesterday and an hour ago: …e1
	// answered 200, 204 and 503; …e2 not at all (it timed out).
	for _, a := range []struct {
		endpoint string
		ago      time.Duration
		code     *int
	}{
		{"e1", 24 * time.Hour, ptr(200)}, {"e1", time.Hour, ptr(204)}, {"e1", time.Hour, ptr(503)}, {"e2", time.Hour, nil},
	} {
		_, err := pool.Exec(ctx, `INSERT INTO wharf_outbox_attempts (id, attempted_at, delivery_id, endpoint_id, event_id, attempt, status, status_code, duration_us)
			VALUES (gen_random_uuid(), now() - $1::interval, gen_random_uuid(), ('00000000-0000-0000-0000-0000000000' || $2)::uuid, gen_random_uuid(), 1,
			        CASE WHEN $3::int BETWEEN 200 AND 299 THEN 'succeeded' ELSE 'failed' END, $3, 1000)`, a.ago, a.endpoint, a.code)
		require.NoError(t, err)
	}

	code, out, _ := cli(t, "-database-url", url, "stats", "-json", "-days", "2")
	require.Equal(t, 0, code)
	var report struct {
		Inbox []struct {
			Source         string  `json:"source"`
			Received       int64   `json:"received"`
			Duplicates     int64   `json:"duplicates_blocked"`
			DuplicateRatio float64 `json:"duplicate_ratio"`
			Processed      int64   `json:"processed"`
			Dead           int64   `json:"dead"`
			SuccessRate    float64 `json:"processing_success_rate"`
		} `json:"inbox"`
		Duplicated []struct {
			EventID    string `json:"event_id"`
			Duplicates int64  `json:"duplicates_blocked"`
		} `json:"most_duplicated"`
		Endpoints []struct {
			EndpointID  string  `json:"endpoint_id"`
			Attempts    int64   `json:"attempts"`
			Succeeded   int64   `json:"succeeded"`
			SuccessRate float64 `json:"success_rate"`
		} `json:"endpoints"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &report))
	require.Len(t, report.Inbox, 1)
	day := report.Inbox[0]
	require.Equal(t, "stripe", day.Source)
	require.EqualValues(t, 3, day.Received)
	require.EqualValues(t, 3, day.Duplicates)
	require.InDelta(t, 0.5, day.DuplicateRatio, 1e-9, "3 duplicates of 6 deliveries")
	require.EqualValues(t, 2, day.Processed)
	require.EqualValues(t, 1, day.Dead)
	require.InDelta(t, 2.0/3, day.SuccessRate, 1e-9)
	require.Equal(t, "evt_1", report.Duplicated[0].EventID)
	require.EqualValues(t, 2, report.Duplicated[0].Duplicates)
	require.Len(t, report.Endpoints, 2)
	e1, e2 := report.Endpoints[0], report.Endpoints[1]
	require.Equal(t, "00000000-0000-0000-0000-0000000000e1", e1.EndpointID)
	require.EqualValues(t, 3, e1.Attempts)
	require.EqualValues(t, 2, e1.Succeeded)
	require.InDelta(t, 2.0/3, e1.SuccessRate, 1e-9)
	require.Equal(t, "00000000-0000-0000-0000-0000000000e2", e2.EndpointID)
	require.EqualValues(t, 1, e2.Attempts)
	require.EqualValues(t, 0, e2.Succeeded)

	// The same report once the rollup job has counted the days' hours,
	// which it then reads instead of the rows: the attempts could be gone.
	tomorrow := time.Now().UTC().Truncate(24 * time.Hour).Add(24*time.Hour + 10*time.Minute)
	m, err := jobs.NewMaintainer(pool, &jobs.Config{Now: func() time.Time { return tomorrow }})
	require.NoError(t, err)
	_, err = m.Rollup(ctx)
	require.NoError(t, err)
	code, rolledOut, _ := cli(t, "-database-url", url, "stats", "-json", "-days", "2")
	require.Equal(t, 0, code)
	require.JSONEq(t, out, rolledOut)
	_, err = pool.Exec(ctx, "DELETE FROM wharf_outbox_attempts")
	require.NoError(t, err)
	code, rolledOut, _ = cli(t, "-database-url", url, "stats", "-json", "-days", "2")
	require.Equal(t, 0, code)
	require.JSONEq(t, out, rolledOut)

	code, out, _ = cli(t, "-database-url", url, "stats")
	require.Equal(t, 0, code)
	require.Contains(t, out, "DUPLICATES BLOCKED")
	require.Contains(t, out, "50.0%")
	code, _, errOut := cli(t, "-database-url", url, "stats", "-days", "0")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "-days must be")
}

func ptr[T any](v T) *T { return &v }
