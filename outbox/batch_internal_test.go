package outbox

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
)

// A chunk of a split whose other deliveries finished before the hand-over
// is a job of its own, not a batch job of one.
func TestSplitChunkOfOneIsAJobOfItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, pool, _, loaded := combineSetup(t, []int{10}, 4)
	members := make([]batchMember, len(loaded))
	for i, row := range loaded {
		members[i] = batchMember{row: row, ref: DeliveryRef{DeliveryID: row.ID}}
	}
	over := splitRest(members[2:], 2, time.Now()) // one chunk: the last two
	_, err := pool.Exec(ctx, `UPDATE wharf_outbox_deliveries SET status = 'succeeded' WHERE id = $1`, loaded[3].ID)
	require.NoError(t, err)
	require.NoError(t, o.handOver(ctx, o.config.Logger, over))

	var kind string
	var args json.RawMessage
	require.NoError(t, pool.QueryRow(ctx, `SELECT kind, args FROM river_job ORDER BY id DESC LIMIT 1`).Scan(&kind, &args))
	require.Equal(t, DeliveryKind, kind, "a job of its own")
	var own DeliveryArgs
	require.NoError(t, json.Unmarshal(args, &own))
	require.Equal(t, DeliveryArgs{DeliveryID: loaded[2].ID, Generation: 1}, own)
}

// A job that ends without an attempt dead-letters its delivery only while
// the delivery is still its own: one finished meanwhile is not reported
// dead to Config.OnDead.
func TestDeadWithoutAttemptLeavesAFinishedDeliveryAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, pool, _, loaded := combineSetup(t, []int{10}, 2)
	var reported []DeadDelivery
	o.config.OnDead = func(_ context.Context, d DeadDelivery) { reported = append(reported, d) }
	_, err := pool.Exec(ctx, `UPDATE wharf_outbox_deliveries SET status = 'succeeded' WHERE id = $1`, loaded[0].ID)
	require.NoError(t, err)

	require.NoError(t, o.deadWithoutAttempt(ctx, o.config.Logger, loaded[0], "its event is gone"),
		"no longer the job's: it completes")
	var cancel *river.JobCancelError
	require.ErrorAs(t, o.deadWithoutAttempt(ctx, o.config.Logger, loaded[1], "its event is gone"), &cancel)
	require.Len(t, reported, 1)
	require.Equal(t, loaded[1].ID, reported[0].DeliveryID)
	rows, err := pool.Query(ctx, `SELECT status FROM wharf_outbox_deliveries ORDER BY seq`)
	require.NoError(t, err)
	statuses, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"succeeded", "dead"}, statuses)
}
