package outbox_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
)

// The …Tx reads see what the transaction wrote before it commits; the pool
// reads do not.
func TestTxReadsSeeTheirTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, &outbox.Config{AllowPrivateNetworks: true, Logger: quietLogger()})

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	ep, err := b.outbox.EndpointCreateTx(ctx, tx, &outbox.EndpointParams{URL: "http://127.0.0.1:9/hook"})
	require.NoError(t, err)

	got, err := b.outbox.EndpointGetTx(ctx, tx, ep.ID)
	require.NoError(t, err)
	require.Equal(t, ep.URL, got.URL)
	secret, err := b.outbox.EndpointSecretTx(ctx, tx, ep.ID)
	require.NoError(t, err)
	require.Equal(t, ep.Secret, secret)
	_, err = b.outbox.EndpointGet(ctx, ep.ID)
	require.ErrorIs(t, err, outbox.ErrNotFound, "not committed yet")

	res, err := b.outbox.PublishTx(ctx, tx, &outbox.Event{Type: "a.b", Data: map[string]int{"n": 1}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Deliveries)
	var id uuid.UUID
	require.NoError(t, tx.QueryRow(ctx, "SELECT id FROM wharf_outbox_deliveries").Scan(&id))
	d, err := b.outbox.DeliveryGetTx(ctx, tx, id)
	require.NoError(t, err)
	require.Equal(t, outbox.StatusPending, d.Status)
	attempts, err := b.outbox.AttemptListTx(ctx, tx, id)
	require.NoError(t, err)
	require.Empty(t, attempts)
	_, err = b.outbox.DeliveryGet(ctx, id)
	require.ErrorIs(t, err, outbox.ErrNotFound)
	require.NoError(t, tx.Rollback(ctx))

	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.outbox.EndpointGetTx(ctx, tx, ep.ID)
		require.ErrorIs(t, err, outbox.ErrNotFound, "rolled back")
		return nil
	}))
}
