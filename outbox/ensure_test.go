package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
)

// TestEndpointEnsure: called at every start, EndpointEnsure creates an
// endpoint once, updates only what changed, keeps the secret, and never
// duplicates — not even when several processes start at once.
func TestEndpointEnsure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	params := &outbox.EndpointParams{URL: "https://hooks.example.com/wharf", EventTypes: []string{"order.*"}}

	first, err := b.outbox.EndpointEnsure(ctx, params)
	require.NoError(t, err)
	require.True(t, first.Created)
	require.NotEmpty(t, first.Secret)

	again, err := b.outbox.EndpointEnsure(ctx, params)
	require.NoError(t, err)
	require.False(t, again.Created)
	require.False(t, again.Updated, "nothing changed")
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, first.Secret, again.Secret)

	changed := *params
	changed.EventTypes = []string{"order.*", "refund.*"}
	changed.Timeout = 5 * time.Second
	changed.Description = "orders"
	updated, err := b.outbox.EndpointEnsure(ctx, &changed)
	require.NoError(t, err)
	require.True(t, updated.Updated)
	require.Equal(t, first.ID, updated.ID)
	require.Equal(t, []string{"order.*", "refund.*"}, updated.EventTypes)
	require.Equal(t, 5*time.Second, updated.Timeout)
	got, err := b.outbox.EndpointGet(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, "orders", got.Description)

	// Another tenant's endpoint with the same URL is another endpoint.
	other := changed
	other.Tenant = "acme"
	otherRes, err := b.outbox.EndpointEnsure(ctx, &other)
	require.NoError(t, err)
	require.True(t, otherRes.Created)

	// A secret that differs is refused; the same secret is fine.
	withSecret := changed
	withSecret.Secret = first.Secret
	_, err = b.outbox.EndpointEnsure(ctx, &withSecret)
	require.NoError(t, err)
	withSecret.Secret = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWY="
	_, err = b.outbox.EndpointEnsure(ctx, &withSecret)
	require.ErrorIs(t, err, outbox.ErrInvalidEndpoint)
	require.NotContains(t, err.Error(), "QUJDREVG", "the error quotes a secret")

	// Concurrent starts create one endpoint: a second ensure waits for
	// the first's transaction, then finds its endpoint.
	racing := &outbox.EndpointParams{URL: "https://hooks.example.com/racing"}
	tx1, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx1.Rollback(ctx) }()
	res1, err := b.outbox.EndpointEnsureTx(ctx, tx1, racing)
	require.NoError(t, err)
	require.True(t, res1.Created)
	second := make(chan *outbox.EndpointEnsureResult, 1)
	go func() {
		res, err := b.outbox.EndpointEnsure(ctx, racing)
		if err != nil {
			t.Error(err)
		}
		second <- res
	}()
	var res2 *outbox.EndpointEnsureResult
	require.Eventually(t, func() bool {
		select {
		case res2 = <-second: // finished without waiting: it cannot have seen the first
			return true
		default:
		}
		var waiting int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())").Scan(&waiting))
		return waiting > 0
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, tx1.Commit(ctx))
	if res2 == nil {
		res2 = <-second
	}
	require.NotNil(t, res2)
	require.False(t, res2.Created, "two concurrent ensures created two endpoints")
	require.Equal(t, res1.ID, res2.ID)

	// Duplicates made by EndpointCreate are reported, not guessed at.
	_, err = b.outbox.EndpointCreate(ctx, racing)
	require.NoError(t, err)
	_, err = b.outbox.EndpointEnsure(ctx, racing)
	require.ErrorIs(t, err, outbox.ErrAmbiguousEndpoint)

	_, err = b.outbox.EndpointEnsure(ctx, &outbox.EndpointParams{URL: "ftp://nope"})
	require.ErrorIs(t, err, outbox.ErrInvalidEndpoint)
}
