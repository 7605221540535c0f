package delivery

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/admission"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/outboxtype"
)

// A chunk of a split whose other deliveries finished before the hand-over
// is a job of its own, not a batch job of one.
func TestSplitChunkOfOneIsAJobOfItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, pool, _, loaded := combineSetup(t, []int32{10}, 4)
	members := make([]member, len(loaded))
	for i, row := range loaded {
		members[i] = member{d: row, ref: Ref{DeliveryID: row.ID}}
	}
	over := splitRest(members[2:], 2, time.Now()) // one chunk: the last two
	_, err := pool.Exec(ctx, `UPDATE wharf_outbox_deliveries SET status = 'succeeded' WHERE id = $1`, loaded[3].ID)
	require.NoError(t, err)
	require.NoError(t, e.handOver(ctx, e.config.Logger, over))

	var kind string
	var args json.RawMessage
	require.NoError(t, pool.QueryRow(ctx, `SELECT kind, args FROM river_job ORDER BY id DESC LIMIT 1`).Scan(&kind, &args))
	require.Equal(t, Kind, kind, "a job of its own")
	var own Args
	require.NoError(t, json.Unmarshal(args, &own))
	require.Equal(t, Args{DeliveryID: loaded[2].ID, Generation: 1}, own)
}

// A job that ends without an attempt dead-letters its delivery only while
// the delivery is still its own: one finished meanwhile is not reported
// dead to Config.OnDead.
func TestDeadWithoutAttemptLeavesAFinishedDeliveryAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, pool, _, loaded := combineSetup(t, []int32{10}, 2)
	var reported []Dead
	e.config.OnDead = func(_ context.Context, d Dead) { reported = append(reported, d) }
	_, err := pool.Exec(ctx, `UPDATE wharf_outbox_deliveries SET status = 'succeeded' WHERE id = $1`, loaded[0].ID)
	require.NoError(t, err)

	require.NoError(t, e.deadWithoutAttempt(ctx, e.config.Logger, loaded[0], "its event is gone"),
		"no longer the job's: it completes")
	var cancel *river.JobCancelError
	require.ErrorAs(t, e.deadWithoutAttempt(ctx, e.config.Logger, loaded[1], "its event is gone"), &cancel)
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
// leaves room; one whose lease was lost meanwhile, or whose endpoint's cap
// was lowered below its slot, splits.
func TestSpanEndAtTheCapExtendsTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, pool, eps, loaded := combineSetup(t, []int32{2}, 3)
	e.config.DeliveryBatchSpan = time.Second
	first := loaded[0]
	const timeout = 10 * time.Second
	take := func(row *outboxtype.Delivery) *admission.Ticket {
		ticket, err := e.admission.Admit(ctx, row, admission.Request{Hold: e.config.DeliveryBatchSpan + timeout})
		require.NoError(t, err, "admitted, no wait")
		return ticket
	}
	ticket := take(first)
	slot := ticket.Slot()
	take(loaded[1]) // the cap's other slot
	left := func() time.Duration {
		var secs float64
		require.NoError(t, pool.QueryRow(ctx,
			`SELECT extract(epoch FROM expires_at - now()) FROM wharf_outbox_leases WHERE endpoint_id = $1 AND slot = $2`,
			eps[0], slot).Scan(&secs))
		return time.Duration(secs * float64(time.Second))
	}
	// expire makes the batch's lease end in 5 s: most of it gone, and
	// still live however slowly the test runs.
	expire := func() {
		_, err := pool.Exec(ctx, `UPDATE wharf_outbox_leases SET expires_at = now() + interval '5 seconds', delivery_id = $3
			WHERE endpoint_id = $1 AND slot = $2`, eps[0], slot, first.ID)
		require.NoError(t, err)
	}
	log := e.config.Logger
	const rest, sent = 2, 1 // more left than one more span sends

	expire()
	keep, _ := e.spanEnd(ctx, log, first, ticket, timeout, rest, sent, 1)
	require.True(t, keep, "no slot free: it goes on")
	require.Greater(t, left(), e.config.DeliveryBatchSpan+timeout, "for another span and a request")

	expire()
	keep, size := e.spanEnd(ctx, log, first, ticket, timeout, rest, sent, maxBatchSpans)
	require.False(t, keep, "its last span")
	require.Equal(t, 2, size, "the rest in one job: the slot it gives back")
	require.Less(t, left(), 6*time.Second, "not extended")

	short, cancel := context.WithTimeout(ctx, e.config.DeliveryBatchSpan+timeout+jobMargin-time.Second)
	defer cancel()
	keep, _ = e.spanEnd(short, log, first, ticket, timeout, rest, sent, 1)
	require.False(t, keep, "River's timeout leaves no room for another span")

	_, err := pool.Exec(ctx, `UPDATE wharf_outbox_leases SET delivery_id = $3 WHERE endpoint_id = $1 AND slot = $2`,
		eps[0], slot, loaded[2].ID)
	require.NoError(t, err)
	keep, size = e.spanEnd(ctx, log, first, ticket, timeout, rest, sent, 1)
	require.False(t, keep, "the lease is another's: it splits")
	require.Equal(t, 2, size)

	expire()
	_, err = pool.Exec(ctx, `UPDATE wharf_outbox_endpoints SET max_in_flight = 1 WHERE id = $1`, eps[0])
	require.NoError(t, err)
	keep, size = e.spanEnd(ctx, log, first, ticket, timeout, rest, sent, 1)
	require.False(t, keep, "a lease is above the lowered cap (its own or the other's): it splits")
	require.Equal(t, 1, size, "by what it sent")
	var holder uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT delivery_id FROM wharf_outbox_leases WHERE endpoint_id = $1 AND slot = 1`,
		eps[0]).Scan(&holder))
	n, err := e.queries.OutboxLeaseExtend(ctx, dbsqlc.OutboxLeaseExtendParams{EndpointID: eps[0], Slot: 1, DeliveryID: holder, LeaseSeconds: 60})
	require.NoError(t, err)
	require.Zero(t, n, "no lease above the cap is extended")
}

// An uncapped endpoint's batch job goes on past its span when the rest is
// no more than it sent in the span, and splits by what it sent otherwise.
func TestSpanEndWithoutACap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, _, _, loaded := combineSetup(t, []int32{0}, 1) // no cap
	e.config.DeliveryBatchSpan = time.Second
	uncapped, err := e.admission.Admit(ctx, loaded[0], admission.Request{})
	require.NoError(t, err)
	require.Equal(t, int32(admission.NoSlot), uncapped.Slot())
	keep, _ := e.spanEnd(ctx, e.config.Logger, loaded[0], uncapped, 10*time.Second, 3, 3, 1)
	require.True(t, keep, "the rest fits in one more span")
	keep, size := e.spanEnd(ctx, e.config.Logger, loaded[0], uncapped, 10*time.Second, 7, 3, 1)
	require.False(t, keep)
	require.Equal(t, 3, size)
	keep, size = e.spanEnd(ctx, e.config.Logger, loaded[0], uncapped, 10*time.Second, 3, 3, maxBatchSpans)
	require.False(t, keep, "its last span")
	require.Equal(t, 3, size)
}
