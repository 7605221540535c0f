package idempotency_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/idempotency"
)

func TestDeleteExpired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, testOptions{config: idempotency.Config{KeyRetention: time.Hour}})
	claim := func(key string) {
		t.Helper()
		res := b.do(t, payoutOf(key))
		require.Equal(t, http.StatusCreated, res.status, res.body)
	}
	for i := range 5 {
		claim(fmt.Sprintf("old-%d", i))
	}
	claim("new-0")
	claim("new-1")
	require.Equal(t, 7, b.keyCount(t))

	t.Run("BadInputDeletesNothing", func(t *testing.T) {
		for _, size := range []int{0, -1, math.MaxInt32 + 1} {
			n, err := idempotency.DeleteExpired(ctx, b.pool, size)
			require.ErrorContains(t, err, "batchSize")
			require.Zero(t, n)
		}
		n, err := idempotency.DeleteExpired(ctx, nil, 10)
		require.ErrorContains(t, err, "pool is nil")
		require.Zero(t, n)
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		n, err = idempotency.DeleteExpired(cancelled, b.pool, 10)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, n)
		require.Equal(t, 7, b.keyCount(t))
	})

	t.Run("NothingBeforeExpiry", func(t *testing.T) {
		for i := range 5 {
			b.age(t, fmt.Sprintf("old-%d", i), time.Hour-time.Minute)
		}
		n, err := idempotency.DeleteExpired(ctx, b.pool, 10)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, 7, b.keyCount(t))
	})

	t.Run("BatchesSkipLockedKeys", func(t *testing.T) {
		for i := range 5 {
			b.age(t, fmt.Sprintf("old-%d", i), time.Minute)
		}
		// A request in flight holding an expired key (reclaiming it) must
		// not make pruning wait.
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, "SELECT 1 FROM wharf_idempotency_keys WHERE idempotency_key = 'old-0' FOR UPDATE")
		require.NoError(t, err)

		n, err := idempotency.DeleteExpired(ctx, b.pool, 2)
		require.NoError(t, err)
		require.Equal(t, 4, n, "batches of 2, 2 and 0, the locked key skipped")
		require.Equal(t, "completed", b.keyStatus(t, "old-0"))

		require.NoError(t, tx.Rollback(ctx))
		n, err = idempotency.DeleteExpired(ctx, b.pool, 2)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, 2, b.keyCount(t))
		require.Equal(t, "completed", b.keyStatus(t, "new-0"))
		require.Equal(t, "completed", b.keyStatus(t, "new-1"))
	})
}
