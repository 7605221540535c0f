package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/jobs"
)

// TestPeriodicJobsRecordRetention: the periodic jobs record the
// maintainer's effective retention (defaults applied) in the database, where
// the operator's tools read it; before any run there is no record.
func TestPeriodicJobsRecordRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	_, err := jobs.ReadRetention(ctx, pool)
	require.ErrorIs(t, err, jobs.ErrNoRetentionRecord)

	before := time.Now()
	runPeriodicJobs(t, pool, &jobs.Config{Logger: quiet, InboxRetention: 60 * 24 * time.Hour, ScrubAfter: 36 * time.Hour}, nil)
	rec, err := jobs.ReadRetention(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, jobs.Config{
		DedupeWindow: jobs.DefaultDedupeWindow, InboxRetention: 60 * 24 * time.Hour, OutboxRetention: jobs.DefaultOutboxRetention,
		AttemptRetention: jobs.DefaultAttemptRetention, DeadLetterRetention: jobs.DefaultDeadLetterRetention,
		ErasedKeyRetention: jobs.DefaultErasedKeyRetention, ScrubAfter: 36 * time.Hour, AuditRetention: jobs.DefaultAuditRetention,
	}, rec.Config)
	require.WithinDuration(t, before, rec.RecordedAt, time.Minute)

	// A maintainer started with other settings replaces the record.
	m, err := jobs.NewMaintainer(pool, &jobs.Config{Logger: quiet, DedupeWindow: 96 * time.Hour})
	require.NoError(t, err)
	require.NoError(t, m.RecordRetention(ctx))
	rec, err = jobs.ReadRetention(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, 96*time.Hour, rec.Config.DedupeWindow)
	require.Equal(t, jobs.DefaultInboxRetention, rec.Config.InboxRetention)
	require.Zero(t, rec.Config.ScrubAfter)
}
