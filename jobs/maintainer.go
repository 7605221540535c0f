package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/partition"
)

// Maintainer runs partition upkeep and retention. The periodic jobs use
// one; the CLI and tests call it directly.
type Maintainer struct {
	pool    *pgxpool.Pool
	cfg     *Config
	metrics *metrics
}

// NewMaintainer returns a Maintainer over pool, or an error when cfg is
// invalid.
func NewMaintainer(pool *pgxpool.Pool, cfg *Config) (*Maintainer, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", ErrInvalidConfig)
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(c.MeterProvider, pool)
	if err != nil {
		return nil, fmt.Errorf("jobs: metrics: %w", err)
	}
	return &Maintainer{pool: pool, cfg: c, metrics: m}, nil
}

// UpkeepResult says what a partition upkeep run did.
type UpkeepResult struct {
	// Created lists the partitions created.
	Created []string `json:"created"`
	// Finalized lists partitions whose interrupted detach was completed and
	// that were then dropped.
	Finalized []string `json:"finalized,omitempty"`
}

// Upkeep makes sure every Wharf partitioned table has partitions from
// yesterday through PartitionDaysAhead days ahead. Existing partitions are
// left alone; running it twice, or on two nodes at once, is a no-op.
func (m *Maintainer) Upkeep(ctx context.Context) (*UpkeepResult, error) {
	now := m.cfg.Now()
	created, err := partition.EnsureAll(ctx, m.pool, now.AddDate(0, 0, -1), now.AddDate(0, 0, m.cfg.PartitionDaysAhead))
	res := &UpkeepResult{Created: created}
	if err != nil {
		return res, fmt.Errorf("jobs: partition upkeep: %w", err)
	}
	if len(created) > 0 {
		m.cfg.Logger.InfoContext(ctx, "wharf: partitions created", "partitions", created)
	}
	return res, nil
}

// PruneOpts tunes one Prune run.
type PruneOpts struct {
	// DryRun reports what would be dropped, deferred and deleted without
	// changing anything.
	DryRun bool
}

// PruneResult says what a retention run did (or, dry, would do).
type PruneResult struct {
	// DryRun is true when nothing was changed.
	DryRun bool `json:"dry_run,omitempty"`
	// Skipped is true when another prune (another node's, or the CLI's) was
	// running: this one did nothing.
	Skipped bool `json:"skipped,omitempty"`
	// Dropped lists the expired partitions dropped.
	Dropped []string `json:"dropped"`
	// Deferred lists expired partitions kept because they hold unfinished
	// rows.
	Deferred []DeferredPartition `json:"deferred"`
	// DedupeKeysDeleted counts inbox dedupe keys pruned.
	DedupeKeysDeleted int64 `json:"dedupe_keys_deleted"`
	// PastKeysDeleted counts the past dedupe keys deleted with their
	// messages' retention (InboxRetention): kept after a key's pruning so
	// that a late arrival of its event is told (inbox.Message.RedeliveryOf).
	PastKeysDeleted int64 `json:"past_keys_deleted"`
	// IdempotencyKeysDeleted counts expired Idempotency-Key records pruned.
	IdempotencyKeysDeleted int64 `json:"idempotency_keys_deleted"`
	// DeliveriesDeleted counts finished outbox deliveries of expired events
	// pruned.
	DeliveriesDeleted int64 `json:"deliveries_deleted"`
	// AuditEntriesDeleted counts audit log entries older than
	// Config.AuditRetention pruned.
	AuditEntriesDeleted int64 `json:"audit_entries_deleted"`
	// MessagesScrubbed and EventsScrubbed count the inbox messages and
	// outbox events whose bodies were erased (Config.ScrubAfter).
	MessagesScrubbed int64 `json:"messages_scrubbed"`
	EventsScrubbed   int64 `json:"events_scrubbed"`
	// ResponsesScrubbed counts outbox attempts whose recorded response was
	// erased (Config.ScrubAfter): an endpoint may echo the payload.
	ResponsesScrubbed int64 `json:"responses_scrubbed"`
}

// DeferredPartition is an expired partition kept for its unfinished rows.
type DeferredPartition struct {
	Name       string `json:"name"`
	Unfinished int64  `json:"unfinished"`
}

// tablePolicy is how retention treats one partitioned table.
type tablePolicy struct {
	table     string
	retention func(*Config) time.Duration
	// unfinished counts the rows of [dayStart, dayEnd) that must be kept;
	// nil for logs, which are never unfinished.
	unfinished func(ctx context.Context, q *dbsqlc.Queries, dayStart, dayEnd, deadCutoff time.Time) (int64, error)
	// oldestUnfinished returns the partition key of the oldest unfinished
	// row, pgx.ErrNoRows when there is none; nil for logs.
	oldestUnfinished func(ctx context.Context, q *dbsqlc.Queries) (time.Time, error)
}

var tablePolicies = []tablePolicy{
	{
		table:     "wharf_inbox_messages",
		retention: func(c *Config) time.Duration { return c.InboxRetention },
		unfinished: func(ctx context.Context, q *dbsqlc.Queries, dayStart, dayEnd, deadCutoff time.Time) (int64, error) {
			return q.RetentionInboxUnfinishedCount(ctx, dbsqlc.RetentionInboxUnfinishedCountParams{
				DayStart: dayStart, DayEnd: dayEnd, DeadCutoff: deadCutoff,
			})
		},
		oldestUnfinished: func(ctx context.Context, q *dbsqlc.Queries) (time.Time, error) {
			return q.RetentionInboxOldestUnfinished(ctx)
		},
	},
	{
		// Events are kept while a delivery needs their payload.
		table:     "wharf_outbox_events",
		retention: func(c *Config) time.Duration { return c.OutboxRetention },
		unfinished: func(ctx context.Context, q *dbsqlc.Queries, dayStart, dayEnd, deadCutoff time.Time) (int64, error) {
			return q.RetentionOutboxUnfinishedCount(ctx, dbsqlc.RetentionOutboxUnfinishedCountParams{
				DayStart: dayStart, DayEnd: dayEnd, DeadCutoff: deadCutoff,
			})
		},
		oldestUnfinished: func(ctx context.Context, q *dbsqlc.Queries) (time.Time, error) {
			return q.RetentionOutboxOldestUnfinished(ctx)
		},
	},
	{
		// Attempt logs are history: they go by age alone.
		table:     "wharf_outbox_attempts",
		retention: func(c *Config) time.Duration { return c.AttemptRetention },
	},
}
