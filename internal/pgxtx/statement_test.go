package pgxtx_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/pgxtx"
	"github.com/wharfhq/wharf/internal/testdb"
)

// Capture gives a generated :exec method's statement and arguments without
// sending them; sent later, they do what the method does.
func TestCapture(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	stmt := pgxtx.Capture(func(db pgxtx.DBTX) error {
		return dbsqlc.New(db).InboxMessagesMarkProcessed(ctx, dbsqlc.InboxMessagesMarkProcessedParams{
			Now: now, ReceivedAt: now, Ids: pgxtx.UUIDTexts([]uuid.UUID{uuid.New()}),
		})
	})
	require.Contains(t, stmt.SQL, "UPDATE wharf_inbox_messages")
	require.Len(t, stmt.Args, 3)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, stmt.SQL, stmt.Args...)
		require.Zero(t, tag.RowsAffected(), "no such message")
		return err
	}))
}
