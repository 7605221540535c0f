package outbox

import (
	"context"
	"encoding/json"
	"testing"
	"time"

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
