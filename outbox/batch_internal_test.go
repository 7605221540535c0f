package outbox

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
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

// A batch job at its endpoint's cap goes on past its span with its lease
// extended, for at most maxBatchSpans spans and while River's timeout
// leaves room; one whose lease was lost meanwhile splits.
func TestSpanEndAtTheCapExtendsTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, pool, eps, loaded := combineSetup(t, []int{1}, 3)
	o.config.DeliveryBatchSpan = time.Second
	first := loaded[0]
	job := &river.Job[DeliveryArgs]{JobRow: &rivertype.JobRow{}, Args: DeliveryArgs{DeliveryID: first.ID}}
	const timeout = 10 * time.Second
	adm, err := o.acquireLease(ctx, job, first, o.config.DeliveryBatchSpan+timeout, false)
	require.NoError(t, err)
	require.Zero(t, adm.wait)
	left := func() time.Duration {
		var secs float64
		require.NoError(t, pool.QueryRow(ctx,
			`SELECT extract(epoch FROM expires_at - now()) FROM wharf_outbox_leases WHERE endpoint_id = $1 AND slot = $2`,
			eps[0], adm.slot).Scan(&secs))
		return time.Duration(secs * float64(time.Second))
	}
	expire := func(in time.Duration) {
		_, err := pool.Exec(ctx, `UPDATE wharf_outbox_leases SET expires_at = now() + make_interval(secs => $3)
			WHERE endpoint_id = $1 AND slot = $2`, eps[0], adm.slot, in.Seconds())
		require.NoError(t, err)
	}
	log := o.config.Logger

	expire(time.Second) // the span and most of the lease gone
	keep, _ := o.spanEnd(ctx, log, first, adm.slot, timeout, 2, 1, 1)
	require.True(t, keep, "no slot free: it goes on")
	require.Greater(t, left(), o.config.DeliveryBatchSpan+timeout, "for another span and a request")

	expire(time.Second)
	keep, size := o.spanEnd(ctx, log, first, adm.slot, timeout, 2, 1, maxBatchSpans)
	require.False(t, keep, "its last span")
	require.Equal(t, 2, size, "the rest in one job: the slot it gives back")
	require.Less(t, left(), 2*time.Second, "not extended")

	short, cancel := context.WithTimeout(ctx, o.config.DeliveryBatchSpan+timeout+deliveryJobMargin-time.Second)
	defer cancel()
	keep, _ = o.spanEnd(short, log, first, adm.slot, timeout, 2, 1, 1)
	require.False(t, keep, "River's timeout leaves no room for another span")

	_, err = pool.Exec(ctx, `UPDATE wharf_outbox_leases SET delivery_id = $3 WHERE endpoint_id = $1 AND slot = $2`,
		eps[0], adm.slot, loaded[1].ID)
	require.NoError(t, err)
	keep, size = o.spanEnd(ctx, log, first, adm.slot, timeout, 2, 1, 1)
	require.False(t, keep, "the lease is another's: it splits")
	require.Equal(t, 2, size)
}
