package inbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
)

// Rescue settles the unfinished messages that nothing would run, once
// they have been left alone for RescueAfter, and no other: a parked one
// with nothing left to wake it, or one on a completed job, gets a new job;
// one whose job was discarded, cancelled or deleted is dead (a new job
// would crash its process again, or run it out of order), and the next
// message of its ordering key goes on.
func TestRescueStrandedMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	var died []string
	b := setup(t, &setupOpts{cfg: &inbox.Config{OnDead: func(_ context.Context, msg *inbox.Message, _ error) {
		mu.Lock()
		defer mu.Unlock()
		died = append(died, msg.EventID)
	}}})
	createEffects(t, b.pool)
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		return applyEffect(ctx, tx, msg)
	})
	ids := map[string]uuid.UUID{}
	for _, m := range []struct{ id, key string }{
		{"evt_dead_1", "k1"}, {"evt_parked_after_dead", "k1"}, // stranded: a new job
		{"evt_live", "k2"}, {"evt_parked_after_live", "k2"}, // waits for evt_live
		{"evt_dead_3", "k3"}, {"evt_parked_recently", "k3"}, // stranded, but a moment ago
		{"evt_job_discarded", "k4"}, {"evt_after_discarded", "k4"}, // dead; the next goes on
		{"evt_job_completed", ""},                          // a new job
		{"evt_job_cancelled", ""}, {"evt_job_deleted", ""}, // dead
		{"evt_job_available", ""}, // runs
	} {
		res := receiveMany(t, b.pool, b.inbox, []inbox.Incoming{{Source: "payments", EventID: m.id, Body: []byte(`{}`), OrderingKey: m.key}})
		ids[m.id] = res[0].MessageID
		b.clock.Advance(time.Millisecond) // receipt order is unambiguous
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := b.pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	const jobOfMessage = "(SELECT job_id FROM wharf_inbox_messages WHERE id = $1)"
	park := func(eventID string) {
		exec("DELETE FROM river_job WHERE id = "+jobOfMessage, ids[eventID])
		exec("UPDATE wharf_inbox_messages SET job_id = NULL WHERE id = $1", ids[eventID])
	}
	for _, id := range []string{"evt_dead_1", "evt_dead_3"} {
		exec("DELETE FROM river_job WHERE id = "+jobOfMessage, ids[id])
		exec("UPDATE wharf_inbox_messages SET status = 'dead' WHERE id = $1", ids[id])
	}
	park("evt_parked_after_dead")
	park("evt_parked_after_live")
	park("evt_parked_recently")
	park("evt_after_discarded")
	for id, state := range map[string]string{"evt_job_discarded": "discarded", "evt_job_completed": "completed", "evt_job_cancelled": "cancelled"} {
		exec("UPDATE river_job SET state = $2, finalized_at = now() WHERE id = "+jobOfMessage, ids[id], state)
	}
	exec("DELETE FROM river_job WHERE id = "+jobOfMessage, ids["evt_job_deleted"])
	exec("UPDATE wharf_inbox_messages SET updated_at = $1 WHERE id <> $2", b.clock.Now().Add(-inbox.RescueAfter-time.Second), ids["evt_parked_recently"])

	jobBefore := jobOf(t, b.pool, ids["evt_job_available"])
	n, err := b.inbox.Rescue(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	for _, id := range []string{"evt_parked_after_dead", "evt_job_completed", "evt_after_discarded"} {
		var state string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT j.state FROM wharf_inbox_messages m JOIN river_job j ON j.id = m.job_id
			WHERE m.id = $1`, ids[id]).Scan(&state), id)
		require.Equal(t, "available", state, id)
	}
	for id, reason := range map[string]string{"evt_job_discarded": "was discarded", "evt_job_cancelled": "was cancelled", "evt_job_deleted": "is gone"} {
		m, err := b.inbox.Get(ctx, ids[id])
		require.NoError(t, err)
		require.Equal(t, inbox.StatusDead, m.Status, id)
		require.Contains(t, m.LastError, reason, id)
	}
	mu.Lock()
	require.ElementsMatch(t, []string{"evt_job_discarded", "evt_job_cancelled", "evt_job_deleted"}, died)
	mu.Unlock()
	require.Zero(t, jobOf(t, b.pool, ids["evt_parked_after_live"]), "rescued a message its earlier one will wake")
	require.Zero(t, jobOf(t, b.pool, ids["evt_parked_recently"]), "rescued a message changed a moment ago")
	require.Equal(t, jobBefore, jobOf(t, b.pool, ids["evt_job_available"]))
	n, err = b.inbox.Rescue(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a second rescue found more")

	b.startWorkers(t)
	for _, id := range []string{"evt_parked_after_dead", "evt_job_completed", "evt_after_discarded", "evt_live", "evt_parked_after_live", "evt_job_available"} {
		require.Eventually(t, func() bool { return effectCount(t, b.pool, id) == 1 }, 30*time.Second, 10*time.Millisecond, id)
	}
	for _, id := range []string{"evt_parked_recently", "evt_job_discarded", "evt_job_cancelled", "evt_job_deleted"} {
		require.Zero(t, effectCount(t, b.pool, id), id)
	}
}

// The inbox's periodic job runs Rescue, on the inbox's queue.
func TestRescuePeriodicJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	jobs := b.inbox.PeriodicJobs()
	require.Len(t, jobs, 1)
	events := b.startWorkersWith(t, func(cfg *river.Config) { cfg.PeriodicJobs = jobs })
	ev := awaitJob(t, events, river.EventKindJobCompleted)
	require.Equal(t, "wharf_inbox_rescue", ev.Job.Kind)
	require.Equal(t, b.inbox.Queue(), ev.Job.Queue)
}
