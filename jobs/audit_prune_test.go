package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/audit"
	"github.com/wharfhq/wharf/jobs"
	"github.com/wharfhq/wharf/outbox"
)

// Audit entries older than AuditRetention go at the next prune; newer ones
// stay, and the setting is recorded for the operator's tools.
func TestPruneDropsOldAuditEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, &jobs.Config{AuditRetention: 10 * 24 * time.Hour})
	old, err := b.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: "https://old.example/hook"})
	require.NoError(t, err)
	b.clock.Advance(11 * 24 * time.Hour)
	recent, err := b.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: "https://new.example/hook"})
	require.NoError(t, err)

	res, err := b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.AuditEntriesDeleted)
	entries, err := audit.List(ctx, b.pool, nil)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, recent.ID.String(), entries[0].ObjectID)
	require.NotEqual(t, old.ID.String(), entries[0].ObjectID)

	require.NoError(t, b.maint.RecordRetention(ctx))
	rec, err := jobs.ReadRetention(ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, 10*24*time.Hour, rec.Config.AuditRetention)

	_, err = jobs.NewMaintainer(b.pool, &jobs.Config{AuditRetention: time.Hour})
	require.ErrorIs(t, err, jobs.ErrInvalidConfig)
}
