package outbox

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
)

// A chunk of a split whose other deliveries finished before the hand-over
// is a job of its own, not a batch job of one.
func TestSplitChunkOfOneIsAJobOfItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	o, err := New(pool, &Config{AllowPrivateNetworks: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	_, err = o.EndpointCreate(ctx, &EndpointParams{URL: "https://example.com/hook"})
	require.NoError(t, err)
	events := make([]*Event, 4)
	for i := range events {
		events[i] = &Event{Type: "t", Data: json.RawMessage(`{}`)}
	}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := o.PublishManyTx(ctx, tx, events)
		return err
	}))
	rows, err := pool.Query(ctx, `SELECT id FROM wharf_outbox_deliveries ORDER BY seq`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	loaded, errs := o.loadMany(ctx, ids)
	members := make([]batchMember, len(ids))
	for i := range ids {
		if errs != nil {
			require.NoError(t, errs[i])
		}
		members[i] = batchMember{row: loaded[i], ref: DeliveryRef{DeliveryID: ids[i]}}
	}
	over := splitRest(members[2:], 2, time.Now()) // one chunk: ids[2] and ids[3]
	_, err = pool.Exec(ctx, `UPDATE wharf_outbox_deliveries SET status = 'succeeded' WHERE id = $1`, ids[3])
	require.NoError(t, err)
	require.NoError(t, o.handOver(ctx, o.config.Logger, over))

	var kind string
	var args json.RawMessage
	require.NoError(t, pool.QueryRow(ctx, `SELECT kind, args FROM river_job ORDER BY id DESC LIMIT 1`).Scan(&kind, &args))
	require.Equal(t, DeliveryKind, kind, "a job of its own")
	var own DeliveryArgs
	require.NoError(t, json.Unmarshal(args, &own))
	require.Equal(t, DeliveryArgs{DeliveryID: ids[2], Generation: 1}, own)
}
