package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/testdb"
)

// TestWakeNotifiesOncePerInterval: the first publish of an interval
// notifies in its transaction; the others of the interval do not, and one
// notification on its own follows at the interval's end.
func TestWakeNotifiesOncePerInterval(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	listener, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, `LISTEN "public.river_insert"`) // River's channel
	require.NoError(t, err)

	w := newWake(dbsqlc.New(pool), "q")
	w.interval = 200 * time.Millisecond
	require.True(t, w.inTx())
	first := w.last.Load()
	require.False(t, w.inTx())
	require.False(t, w.inTx())
	require.True(t, w.trailing.Load(), "a notification on its own is due")
	require.Eventually(t, func() bool { return !w.trailing.Load() && w.last.Load() > first }, 5*time.Second, time.Millisecond)
	require.GreaterOrEqual(t, time.Duration(w.last.Load()-first), w.interval, "not before the interval's end")
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := listener.Conn().WaitForNotification(waitCtx)
	require.NoError(t, err, "the notification on its own reaches River's channel")
	require.JSONEq(t, `{"queue":"q"}`, n.Payload)
}
