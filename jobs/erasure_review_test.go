package jobs_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/jobs"
	"github.com/wharfhq/wharf/outbox"
)

// TestForgetAfterTheWindowLeavesATombstone: an erasure request after the
// dedupe window (the usual case: days or weeks later) finds the key pruned;
// Forget makes it again as a tombstone, so a later redelivery stores
// nothing.
func TestForgetAfterTheWindowLeavesATombstone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	const marker = "MARKER-late-forget-4000000000000002"
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(context.Context, pgx.Tx, *inbox.Message) error { return nil })
	b.startWorkers(t)
	t0 := time.Now()
	b.clock.Set(t0)
	recv := func() inbox.Result {
		var res []inbox.Result
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			var err error
			res, err = b.inbox.ReceiveManyTx(ctx, tx, []inbox.Incoming{{Source: "s", EventID: "evt_late", EventType: "t", Body: []byte(`{"card":"` + marker + `"}`)}})
			return err
		}))
		require.NoError(t, res[0].Err)
		return res[0]
	}
	recv()
	b.awaitJobs(t, 1)
	b.clock.Set(t0.Add(4 * 24 * time.Hour))
	_, err := b.maint.Prune(ctx, nil)
	require.NoError(t, err)

	n, err := b.inbox.Forget(ctx, "s", "evt_late")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Empty(t, findMarker(t, b.pool, marker))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM wharf_inbox_keys WHERE event_id = 'evt_late' AND erased_at IS NOT NULL"), "no tombstone after Forget")

	b.clock.Set(t0.Add(5 * 24 * time.Hour))
	res := recv()
	require.True(t, res.Duplicate, "an erased event came back")
	require.Empty(t, findMarker(t, b.pool, marker))
}

// TestScrubReachesAttemptsOfDeletedEndpoints: attempts whose delivery is
// gone (its endpoint was deleted) lose the endpoint's echoed response after
// ScrubAfter too.
func TestScrubReachesAttemptsOfDeletedEndpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, &jobs.Config{ScrubAfter: 7 * 24 * time.Hour})
	const marker = "MARKER-echo-5105105105105100"
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, _ = w.Write(body)
	}))
	t.Cleanup(echo.Close)
	_, err := b.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: echo.URL + "/keep"})
	require.NoError(t, err)
	gone, err := b.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: echo.URL + "/gone"})
	require.NoError(t, err)
	b.startWorkers(t)
	t0 := time.Now()
	b.clock.Set(t0)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.outbox.PublishTx(ctx, tx, &outbox.Event{Type: "card.charged", Data: map[string]string{"card": marker}})
		return err
	}))
	b.awaitJobs(t, 2)
	require.NoError(t, b.outbox.EndpointDelete(ctx, gone.ID))

	b.clock.Set(t0.Add(8 * 24 * time.Hour))
	res, err := b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.EventsScrubbed)
	require.Empty(t, findMarker(t, b.pool, marker), "after ScrubAfter")
}

// TestKeyPruneSparesATombstoneCommittedMeanwhile: a Forget that commits
// while the key prune waits for the key's row lock keeps its tombstone.
func TestKeyPruneSparesATombstoneCommittedMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(context.Context, pgx.Tx, *inbox.Message) error { return nil })
	b.startWorkers(t)
	t0 := time.Now()
	b.clock.Set(t0)
	b.receive(t, "s", "evt_race")
	b.awaitJobs(t, 1)

	// Forget's key update, not yet committed.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "UPDATE wharf_inbox_keys SET erased_at = now() WHERE source = 's' AND event_id = 'evt_race'")
	require.NoError(t, err)

	done := make(chan int64, 1)
	go func() {
		n, err := dbsqlc.New(b.pool).RetentionInboxKeysDelete(ctx, dbsqlc.RetentionInboxKeysDeleteParams{
			Cutoff: t0.Add(time.Hour), ErasedCutoff: t0.Add(-90 * 24 * time.Hour), BatchSize: 100,
		})
		if err != nil {
			t.Error(err)
		}
		done <- n
	}()
	require.Eventually(t, func() bool {
		return b.count(t, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%DELETE FROM wharf_inbox_keys%'") == 1
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, tx.Commit(ctx))
	n := <-done
	require.Zero(t, n, "the tombstone committed by Forget was deleted")
}
