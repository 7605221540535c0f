package jobs_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/jobs"
	"github.com/wharfhq/wharf/outbox"
)

// findMarker returns every column of every table (partitions included,
// River's too) whose value contains marker: where a payload survived.
func findMarker(t *testing.T, pool *pgxpool.Pool, marker string) []string {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `
		SELECT format('%I.%I', n.nspname, c.relname), a.attname, format_type(a.atttypid, a.atttypmod)
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
		  AND format_type(a.atttypid, a.atttypmod) IN ('text', 'bytea', 'jsonb', 'json', 'text[]', 'character varying', 'jsonb[]')`)
	require.NoError(t, err)
	type column struct{ table, name, typ string }
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		return c, r.Scan(&c.table, &c.name, &c.typ)
	})
	require.NoError(t, err)
	require.NotEmpty(t, cols)
	var found []string
	for _, c := range cols {
		expr := fmt.Sprintf("%q::text", c.name)
		if c.typ == "bytea" {
			expr = fmt.Sprintf("encode(%q, 'escape')", c.name)
		}
		var n int
		require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE strpos(%s, $1) > 0", c.table, expr), marker).Scan(&n))
		if n > 0 {
			found = append(found, fmt.Sprintf("%s.%s (%d rows)", c.table, c.name, n))
		}
	}
	return found
}

// TestErasureLeavesNoCopy: after ScrubAfter, and after Forget, a payload
// is nowhere in the database — not in a message's last error quoting it,
// nor in River's job rows and their errors, nor in an endpoint's echoed
// response — and a redelivery of a forgotten event long after the dedupe
// window stays erased.
func TestErasureLeavesNoCopy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, &jobs.Config{ScrubAfter: 7 * 24 * time.Hour})
	const scrubbed, forgotten = "MARKER-scrubbed-4111111111111111", "MARKER-forgotten-5500000000000004"

	// Handlers fail quoting the payload, as careless handlers do (River
	// records the error of a message's job), then succeed or fail for good.
	var runs sync.Map
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(_ context.Context, _ pgx.Tx, msg *inbox.Message) error {
		n, _ := runs.LoadOrStore(msg.ID, new(atomic.Int32))
		switch run := n.(*atomic.Int32).Add(1); {
		case run == 1:
			return fmt.Errorf("card declined: %s", msg.Body)
		case msg.EventID == "evt_forgotten":
			return inbox.Permanent(fmt.Errorf("still declined: %s", msg.Body))
		}
		return nil
	})
	// The endpoint echoes what it was sent.
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, _ = w.Write(body)
	}))
	t.Cleanup(echo.Close)
	_, err := b.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: echo.URL, EventTypes: []string{"card.*"}})
	require.NoError(t, err)
	b.startWorkers(t)

	t0 := time.Now()
	b.clock.Set(t0)
	receive := func(eventID, marker string) uuid.UUID {
		var res []inbox.Result
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			var err error
			res, err = b.inbox.ReceiveManyTx(ctx, tx, []inbox.Incoming{{
				Source: "s", EventID: eventID, EventType: "t",
				Header: http.Header{"X-Card": {marker}},
				Body:   []byte(`{"card":"` + marker + `"}`),
			}})
			return err
		}))
		require.NoError(t, res[0].Err)
		return res[0].MessageID
	}
	done := receive("evt_scrubbed", scrubbed)
	b.awaitJobs(t, 1) // failed, retries in an hour: make it now
	_, err = b.pool.Exec(ctx, "UPDATE river_job SET scheduled_at = now() WHERE state = 'retryable'")
	require.NoError(t, err)
	b.awaitJobs(t, 1)
	msg, err := b.inbox.Get(ctx, done)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusProcessed, msg.Status)
	require.Contains(t, msg.LastError, scrubbed, "the test's premise: the last error quotes the payload")

	dead := receive("evt_forgotten", forgotten)
	b.awaitJobs(t, 1)
	require.NoError(t, b.inbox.Replay(ctx, dead))
	b.awaitJobs(t, 1)
	msg, err = b.inbox.Get(ctx, dead)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDead, msg.Status)

	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.outbox.PublishTx(ctx, tx, &outbox.Event{Type: "card.charged", Data: map[string]string{"card": scrubbed}})
		return err
	}))
	b.awaitJobs(t, 1)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM wharf_outbox_attempts WHERE strpos(encode(response_body, 'escape'), '"+scrubbed+"') > 0"),
		"the test's premise: the echoed response is stored")

	// River recorded the failures, but not the handlers' words: those
	// are the messages' last errors, which erasure reaches.
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM river_job WHERE kind = 'wharf_inbox_process' AND cardinality(errors) > 0"))
	require.Equal(t, []string{
		"public.wharf_inbox_messages_p" + t0.UTC().Format("20060102") + ".headers (1 rows)",
		"public.wharf_inbox_messages_p" + t0.UTC().Format("20060102") + ".body (1 rows)",
		"public.wharf_inbox_messages_p" + t0.UTC().Format("20060102") + ".last_error (1 rows)",
	}, findMarker(t, b.pool, forgotten), "the test's premise: the payload is stored, and quoted by the last error")
	n, err := b.inbox.Forget(ctx, "s", "evt_forgotten")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Empty(t, findMarker(t, b.pool, forgotten), "after Forget")

	b.clock.Set(t0.Add(8 * 24 * time.Hour))
	res, err := b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.MessagesScrubbed)
	require.EqualValues(t, 1, res.EventsScrubbed)
	require.Empty(t, findMarker(t, b.pool, scrubbed), "after ScrubAfter")

	// A redelivery of the forgotten event long past the dedupe window is
	// still a duplicate: its data is not stored again.
	b.clock.Set(t0.Add(60 * 24 * time.Hour))
	_, err = b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	var res2 []inbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		res2, err = b.inbox.ReceiveManyTx(ctx, tx, []inbox.Incoming{{Source: "s", EventID: "evt_forgotten", EventType: "t", Body: []byte(`{"card":"` + forgotten + `"}`)}})
		return err
	}))
	require.True(t, res2[0].Duplicate, "an erased event came back after the dedupe window")
	require.Empty(t, findMarker(t, b.pool, forgotten), "after a late redelivery")

	// The tombstone ends with ErasedKeyRetention (90 days by default).
	b.clock.Set(t0.Add(91 * 24 * time.Hour))
	_, err = b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.Zero(t, b.count(t, "SELECT count(*) FROM wharf_inbox_keys WHERE event_id = 'evt_forgotten'"))
}
