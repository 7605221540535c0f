package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/testdb"
)

// listen listens on River's insert channel on a connection of pool's.
func listen(t *testing.T, pool *pgxpool.Pool) *pgxpool.Conn {
	t.Helper()
	conn, err := pool.Acquire(context.Background())
	require.NoError(t, err)
	t.Cleanup(conn.Release)
	_, err = conn.Exec(context.Background(), `LISTEN "public.river_insert"`)
	require.NoError(t, err)
	return conn
}

// notifications returns the payloads conn receives within d.
func notifications(t *testing.T, conn *pgxpool.Conn, d time.Duration) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var got []string
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return got
		}
		got = append(got, n.Payload)
	}
}

// TestWakeNotifiesOncePerInterval: the first publish of an interval
// notifies in its transaction; the others do not, and are covered by a
// notification on its own an interval after the last of them, and a late
// one after that.
func TestWakeNotifiesOncePerInterval(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	listener := listen(t, pool)
	w := newWake(dbsqlc.New(pool), "q")
	w.interval, w.late = 200*time.Millisecond, 300*time.Millisecond
	require.True(t, w.inTx())
	require.False(t, w.inTx())
	require.False(t, w.inTx())
	suppressed := time.Now()
	require.True(t, w.armed.Load(), "a notification on its own is due")
	got := notifications(t, listener, 350*time.Millisecond)
	require.Len(t, got, 1, "one, the interval after the last publish that did not notify")
	require.GreaterOrEqual(t, time.Since(suppressed), w.interval)
	require.JSONEq(t, `{"queue":"q"}`, got[0])
	require.Len(t, notifications(t, listener, 500*time.Millisecond), 1, "and a late one")
	require.False(t, w.armed.Load())
	require.True(t, w.inTx(), "an interval on, a publish notifies in its transaction again")
}
