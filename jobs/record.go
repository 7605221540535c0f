package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// ErrNoRetentionRecord is returned by ReadRetention when no maintainer has
// recorded its retention settings in the database yet.
var ErrNoRetentionRecord = errors.New("jobs: no retention settings recorded")

// RetentionRecord is the retention an application's maintainer runs with,
// as its periodic jobs record it in the database (RecordRetention): the
// operator's tools (wharf prune, wharf partitions, wharf serve) read it
// rather than assume defaults.
type RetentionRecord struct {
	// Config holds the recorded settings: DedupeWindow, InboxRetention,
	// OutboxRetention, AttemptRetention, DeadLetterRetention,
	// ErasedKeyRetention, ScrubAfter and AuditRetention. Its other fields
	// are zero.
	Config Config
	// RecordedAt is when they were last recorded.
	RecordedAt time.Time
}

// RecordRetention records the maintainer's retention settings in the
// database, replacing the previous record. The periodic jobs call it each
// time they run; an application that runs Prune on a schedule of its own
// calls it too.
func (m *Maintainer) RecordRetention(ctx context.Context) error {
	c := m.cfg
	err := dbsqlc.New(m.pool).RetentionSettingsRecord(ctx, dbsqlc.RetentionSettingsRecordParams{
		DedupeWindowUs:        c.DedupeWindow.Microseconds(),
		InboxRetentionUs:      c.InboxRetention.Microseconds(),
		OutboxRetentionUs:     c.OutboxRetention.Microseconds(),
		AttemptRetentionUs:    c.AttemptRetention.Microseconds(),
		DeadLetterRetentionUs: c.DeadLetterRetention.Microseconds(),
		ErasedKeyRetentionUs:  c.ErasedKeyRetention.Microseconds(),
		ScrubAfterUs:          c.ScrubAfter.Microseconds(),
		AuditRetentionUs:      c.AuditRetention.Microseconds(),
	})
	if err != nil {
		return fmt.Errorf("jobs: record retention settings: %w", err)
	}
	return nil
}

// recordRetention is RecordRetention for the periodic jobs: a failure is
// logged, and retention goes on by the settings it has.
func (m *Maintainer) recordRetention(ctx context.Context) {
	if err := m.RecordRetention(ctx); err != nil {
		m.cfg.Logger.WarnContext(ctx, "wharf: recording the retention settings failed; the operator's tools read the previous record", "error", err)
	}
}

// ReadRetention returns the retention settings recorded by RecordRetention,
// or an error where errors.Is(err, ErrNoRetentionRecord) is true when there
// are none.
func ReadRetention(ctx context.Context, pool *pgxpool.Pool) (*RetentionRecord, error) {
	row, err := dbsqlc.New(pool).RetentionSettingsGet(ctx)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNoRetentionRecord
	}
	if err != nil {
		return nil, fmt.Errorf("jobs: read retention settings: %w", err)
	}
	us := func(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
	return &RetentionRecord{RecordedAt: row.RecordedAt, Config: Config{
		DedupeWindow:        us(row.DedupeWindowUs),
		InboxRetention:      us(row.InboxRetentionUs),
		OutboxRetention:     us(row.OutboxRetentionUs),
		AttemptRetention:    us(row.AttemptRetentionUs),
		DeadLetterRetention: us(row.DeadLetterRetentionUs),
		ErasedKeyRetention:  us(row.ErasedKeyRetentionUs),
		ScrubAfter:          us(row.ScrubAfterUs),
		AuditRetention:      us(row.AuditRetentionUs),
	}}, nil
}
