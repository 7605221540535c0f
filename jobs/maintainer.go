package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/idempotency"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/partition"
)

// Maintainer runs partition upkeep and retention. The periodic jobs use
// one; the CLI and tests call it directly.
type Maintainer struct {
	pool *pgxpool.Pool
	cfg  *Config
}

// NewMaintainer returns a Maintainer over pool, or an error when cfg is
// invalid.
func NewMaintainer(pool *pgxpool.Pool, cfg *Config) (*Maintainer, error) {
	if pool == nil {
		return nil, errors.New("jobs: nil pool")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Maintainer{pool: pool, cfg: c}, nil
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
	// Dropped lists the expired partitions dropped.
	Dropped []string `json:"dropped"`
	// Deferred lists expired partitions kept because they hold unfinished
	// rows.
	Deferred []DeferredPartition `json:"deferred"`
	// DedupeKeysDeleted counts inbox dedupe keys pruned.
	DedupeKeysDeleted int64 `json:"dedupe_keys_deleted"`
	// IdempotencyKeysDeleted counts expired Idempotency-Key records pruned.
	IdempotencyKeysDeleted int64 `json:"idempotency_keys_deleted"`
	// DeliveriesDeleted counts finished outbox deliveries of expired events
	// pruned.
	DeliveriesDeleted int64 `json:"deliveries_deleted"`
	// MessagesScrubbed and EventsScrubbed count the inbox messages and
	// outbox events whose bodies were erased (Config.ScrubAfter).
	MessagesScrubbed int64 `json:"messages_scrubbed"`
	EventsScrubbed   int64 `json:"events_scrubbed"`
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

// Prune drops expired partitions whose rows are all finished, defers the
// others, and deletes expired dedupe keys in batches. One run at a time
// holds the prune lock; a second waits for it and then finds little to do.
func (m *Maintainer) Prune(ctx context.Context, opts *PruneOpts) (*PruneResult, error) {
	if opts == nil {
		opts = &PruneOpts{}
	}
	res := &PruneResult{DryRun: opts.DryRun, Dropped: []string{}, Deferred: []DeferredPartition{}}
	err := m.withLock(ctx, partition.LockKey("wharf.jobs.prune"), func(context.Context) error {
		now := m.cfg.Now()
		for _, policy := range tablePolicies {
			if err := m.pruneTable(ctx, policy, now, opts.DryRun, res); err != nil {
				return err
			}
		}
		return m.pruneRows(ctx, now, opts.DryRun, res)
	})
	m.logPrune(ctx, res, err)
	return res, err
}

func (m *Maintainer) pruneTable(ctx context.Context, policy tablePolicy, now time.Time, dryRun bool, res *PruneResult) error {
	parts, err := partition.List(ctx, m.pool, policy.table)
	if err != nil {
		return fmt.Errorf("jobs: list partitions of %s: %w", policy.table, err)
	}
	// A day is expired when all of it lies before the retention cutoff.
	cutoff := now.Add(-policy.retention(m.cfg))
	for _, p := range parts {
		if p.Day.IsZero() || p.Day.AddDate(0, 0, 1).After(cutoff) {
			continue // not ours, or not expired
		}
		if p.DetachPending {
			// A previous run was interrupted after deciding to drop it.
			if !dryRun {
				if err := partition.Finalize(ctx, m.pool, policy.table, p.Name); err != nil {
					return err
				}
				if err := partition.Drop(ctx, m.pool, p.Name); err != nil {
					return err
				}
			}
			res.Dropped = append(res.Dropped, p.Name)
			continue
		}
		dropped, unfinished, err := m.dropIfFinished(ctx, policy, p, now, dryRun)
		if err != nil {
			return err
		}
		if dropped {
			res.Dropped = append(res.Dropped, p.Name)
		} else {
			res.Deferred = append(res.Deferred, DeferredPartition{Name: p.Name, Unfinished: unfinished})
			m.cfg.Logger.WarnContext(ctx, "wharf: expired partition kept for unfinished rows",
				"partition", p.Name, "unfinished", unfinished)
		}
	}
	return nil
}

// dropIfFinished drops partition p unless it holds unfinished rows. The
// retention lock, held exclusively from the check through the detach, keeps
// replays (which hold it shared) from reviving a row in between.
func (m *Maintainer) dropIfFinished(ctx context.Context, policy tablePolicy, p partition.Info, now time.Time, dryRun bool) (dropped bool, unfinished int64, err error) {
	err = m.withLock(ctx, partition.RetentionLockKey(policy.table), func(ctx context.Context) error {
		if policy.unfinished != nil {
			unfinished, err = policy.unfinished(ctx, dbsqlc.New(m.pool), p.Day, p.Day.AddDate(0, 0, 1), now.Add(-m.cfg.DeadLetterRetention))
			if err != nil {
				return fmt.Errorf("jobs: count unfinished rows of %s: %w", p.Name, err)
			}
		}
		if unfinished > 0 || dryRun {
			return nil
		}
		return partition.Detach(ctx, m.pool, policy.table, p.Name)
	})
	if err != nil || unfinished > 0 {
		return false, unfinished, err
	}
	if !dryRun {
		if err := partition.Drop(ctx, m.pool, p.Name); err != nil {
			return false, 0, err
		}
	}
	return true, 0, nil
}

// pruneRows prunes the non-partitioned tables and scrubs bodies, each in
// bounded batches.
func (m *Maintainer) pruneRows(ctx context.Context, now time.Time, dryRun bool, res *PruneResult) error {
	var err error
	if res.DedupeKeysDeleted, err = m.pruneDedupeKeys(ctx, now.Add(-m.cfg.DedupeWindow), dryRun); err != nil {
		return err
	}
	if res.IdempotencyKeysDeleted, err = m.pruneIdempotencyKeys(ctx, now, dryRun); err != nil {
		return err
	}
	if res.DeliveriesDeleted, err = m.pruneDeliveries(ctx, now, dryRun); err != nil {
		return err
	}
	if m.cfg.ScrubAfter > 0 {
		res.MessagesScrubbed, res.EventsScrubbed, err = m.scrub(ctx, now, dryRun)
	}
	return err
}

// pruneDeliveries deletes finished deliveries of events past retention.
func (m *Maintainer) pruneDeliveries(ctx context.Context, now time.Time, dryRun bool) (int64, error) {
	q := dbsqlc.New(m.pool)
	cutoff, deadCutoff := now.Add(-m.cfg.OutboxRetention), now.Add(-m.cfg.DeadLetterRetention)
	if dryRun {
		return q.RetentionOutboxDeliveriesExpiredCount(ctx, dbsqlc.RetentionOutboxDeliveriesExpiredCountParams{
			Cutoff: cutoff, DeadCutoff: deadCutoff,
		})
	}
	return m.deleteInBatches(ctx, func(ctx context.Context, batch int) (int64, error) {
		return q.RetentionOutboxDeliveriesDelete(ctx, dbsqlc.RetentionOutboxDeliveriesDeleteParams{
			Cutoff: cutoff, DeadCutoff: deadCutoff, BatchSize: int32(batch),
		})
	})
}

// scrub erases the bodies of finished inbox messages and fully delivered
// outbox events older than ScrubAfter.
func (m *Maintainer) scrub(ctx context.Context, now time.Time, dryRun bool) (messages, events int64, err error) {
	q := dbsqlc.New(m.pool)
	cutoff := now.Add(-m.cfg.ScrubAfter)
	if dryRun {
		if messages, err = q.RetentionInboxScrubCount(ctx, cutoff); err != nil {
			return 0, 0, err
		}
		events, err = q.RetentionOutboxScrubCount(ctx, cutoff)
		return messages, events, err
	}
	messages, err = m.deleteInBatches(ctx, func(ctx context.Context, batch int) (int64, error) {
		return q.RetentionInboxScrub(ctx, dbsqlc.RetentionInboxScrubParams{Now: now, Cutoff: cutoff, BatchSize: int32(batch)})
	})
	if err != nil {
		return messages, 0, err
	}
	events, err = m.deleteInBatches(ctx, func(ctx context.Context, batch int) (int64, error) {
		return q.RetentionOutboxScrub(ctx, dbsqlc.RetentionOutboxScrubParams{Now: now, Cutoff: cutoff, BatchSize: int32(batch)})
	})
	return messages, events, err
}

// pruneDedupeKeys deletes expired dedupe keys a batch at a time, so that
// no statement holds its locks for long.
func (m *Maintainer) pruneDedupeKeys(ctx context.Context, cutoff time.Time, dryRun bool) (int64, error) {
	q := dbsqlc.New(m.pool)
	if dryRun {
		return q.RetentionInboxKeysExpiredCount(ctx, cutoff)
	}
	return m.deleteInBatches(ctx, func(ctx context.Context, batch int) (int64, error) {
		return q.RetentionInboxKeysDelete(ctx, dbsqlc.RetentionInboxKeysDeleteParams{Cutoff: cutoff, BatchSize: int32(batch)})
	})
}

// pruneIdempotencyKeys deletes expired Idempotency-Key records in batches.
func (m *Maintainer) pruneIdempotencyKeys(ctx context.Context, now time.Time, dryRun bool) (int64, error) {
	if dryRun {
		return dbsqlc.New(m.pool).RetentionIdempotencyExpiredCount(ctx, now)
	}
	n, err := idempotency.DeleteExpired(ctx, m.pool, now, m.cfg.BatchSize)
	return int64(n), err
}

// batchPauseFactor is the default pause after a batch, in multiples of the
// batch's own time: the pruner works at most a quarter of the time.
const batchPauseFactor = 3

// deleteInBatches calls del (a DELETE or UPDATE of at most one batch) until
// a batch comes back short, pausing between batches (Config.BatchPause), and
// returns the total.
func (m *Maintainer) deleteInBatches(ctx context.Context, del func(context.Context, int) (int64, error)) (int64, error) {
	var total int64
	for {
		start := time.Now()
		n, err := del(ctx, m.cfg.BatchSize)
		total += n
		if err != nil || n < int64(m.cfg.BatchSize) {
			return total, err
		}
		pause := m.cfg.BatchPause
		if pause == 0 {
			pause = min(batchPauseFactor*time.Since(start), time.Second)
		}
		if pause > 0 {
			select {
			case <-ctx.Done():
				return total, ctx.Err()
			case <-time.After(pause):
			}
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// withLock runs fn holding a session advisory lock on a connection of its
// own, waiting for a concurrent holder to finish.
func (m *Maintainer) withLock(ctx context.Context, key int32, fn func(context.Context) error) error {
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	q := dbsqlc.New(conn)
	if err := q.AdvisoryLock(ctx, dbsqlc.AdvisoryLockParams{Class: partition.LockClass(), Key: key}); err != nil {
		return err
	}
	defer func() {
		// A fresh context: ctx may be why we are leaving. If unlocking
		// fails the connection is unusable; closing it frees the lock.
		unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := q.AdvisoryUnlock(unlockCtx, dbsqlc.AdvisoryUnlockParams{Class: partition.LockClass(), Key: key}); err != nil {
			_ = conn.Conn().Close(unlockCtx)
		}
	}()
	return fn(ctx)
}

func (m *Maintainer) logPrune(ctx context.Context, res *PruneResult, err error) {
	attrs := []any{"dry_run", res.DryRun, "dropped", res.Dropped, "deferred", len(res.Deferred),
		"dedupe_keys_deleted", res.DedupeKeysDeleted, "idempotency_keys_deleted", res.IdempotencyKeysDeleted,
		"deliveries_deleted", res.DeliveriesDeleted, "messages_scrubbed", res.MessagesScrubbed, "events_scrubbed", res.EventsScrubbed}
	if err != nil {
		m.cfg.Logger.ErrorContext(ctx, "wharf: prune failed", append(attrs, "error", err)...)
		return
	}
	m.cfg.Logger.InfoContext(ctx, "wharf: prune done", attrs...)
}
