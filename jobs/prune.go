package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/idempotency"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/partition"
)

// Table names whose retention lock the row pruning takes: replays hold it
// shared while they revive rows of these tables.
const (
	inboxMessagesTable = "wharf_inbox_messages"
	outboxEventsTable  = "wharf_outbox_events"
)

// dropTimeout bounds the DROP that follows a DETACH. It runs even when the
// job's context ends, so that a detached table is not left behind.
const dropTimeout = time.Minute

// pruneRun is one retention run. Its statements run on one pooled
// connection, acquired after the run lock and before any retention lock: a
// run never waits for a pooled connection while holding a lock that the
// pool's other holders (replays) may be waiting for. Its advisory locks
// are held by locks, in a transaction of their own (see runLocks): nothing
// in a run depends on session state, so it works through PgBouncer in
// transaction mode.
type pruneRun struct {
	m      *Maintainer
	locks  *runLocks
	conn   *pgx.Conn
	q      *dbsqlc.Queries
	now    time.Time
	dryRun bool
	res    *PruneResult
}

// detachPoll is how often a run holding a retention lock checks whether
// its DETACH … CONCURRENTLY has passed its first transaction.
const detachPoll = 5 * time.Millisecond

// Prune drops expired partitions whose rows are all finished (and tables
// left detached by an interrupted run), defers the others, then prunes the
// narrow tables in batches and scrubs bodies. One run at a time holds the
// prune lock; a second waits for it and then finds little to do.
func (m *Maintainer) Prune(ctx context.Context, opts *PruneOpts) (*PruneResult, error) {
	if opts == nil {
		opts = &PruneOpts{}
	}
	res := &PruneResult{DryRun: opts.DryRun, Dropped: []string{}, Deferred: []DeferredPartition{}}
	if !opts.DryRun {
		// Before taking a connection for the run: DeleteExpired uses the
		// pool, and is safe alongside anything (it skips locked keys).
		n, err := idempotency.DeleteExpired(ctx, m.pool, m.cfg.Now(), m.cfg.BatchSize)
		res.IdempotencyKeysDeleted = int64(n)
		if err != nil {
			m.logPrune(ctx, res, err)
			return res, err
		}
	}
	err := m.prune(ctx, opts, res)
	m.logPrune(ctx, res, err)
	return res, err
}

func (m *Maintainer) prune(ctx context.Context, opts *PruneOpts, res *PruneResult) error {
	locks, err := lockRun(ctx, m.pool, partition.LockKey("wharf.jobs.prune"))
	if err != nil {
		return err
	}
	defer locks.close(ctx)
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	r := &pruneRun{m: m, locks: locks, conn: conn.Conn(), q: dbsqlc.New(conn), dryRun: opts.DryRun, res: res}
	r.now = m.cfg.Now()
	for _, policy := range tablePolicies {
		if err := r.table(ctx, policy); err != nil {
			return err
		}
	}
	return r.rows(ctx)
}

func (r *pruneRun) table(ctx context.Context, policy tablePolicy) error {
	parts, err := partition.List(ctx, r.conn, policy.table)
	if err != nil {
		return fmt.Errorf("jobs: list partitions of %s: %w", policy.table, err)
	}
	detached, err := partition.ListDetached(ctx, r.conn, policy.table)
	if err != nil {
		return fmt.Errorf("jobs: list detached partitions of %s: %w", policy.table, err)
	}
	cutoff := r.now.Add(-policy.retention(r.m.cfg))
	// A day is expired when all of it lies before the retention cutoff.
	expired := func(p partition.Info) bool { return !p.Day.IsZero() && !p.Day.AddDate(0, 0, 1).After(cutoff) }

	for _, p := range detached {
		// Left behind by a run stopped between its DETACH and its DROP: the
		// DETACH came after the check that nothing in it was unfinished.
		if expired(p) {
			if err := r.drop(ctx, p.Name); err != nil {
				return err
			}
		}
	}
	for _, p := range parts {
		if !expired(p) {
			continue
		}
		if p.DetachPending {
			// A previous run was interrupted inside its DETACH.
			if !r.dryRun {
				if err := partition.Finalize(ctx, r.conn, policy.table, p.Name); err != nil {
					return err
				}
			}
			if err := r.drop(ctx, p.Name); err != nil {
				return err
			}
			continue
		}
		unfinished, err := r.detachIfFinished(ctx, policy, p)
		if err != nil {
			return err
		}
		if unfinished > 0 {
			r.res.Deferred = append(r.res.Deferred, DeferredPartition{Name: p.Name, Unfinished: unfinished})
			r.m.cfg.Logger.WarnContext(ctx, "wharf: expired partition kept for unfinished rows",
				"partition", p.Name, "unfinished", unfinished)
			continue
		}
		if err := r.drop(ctx, p.Name); err != nil {
			return err
		}
	}
	return nil
}

// detachIfFinished detaches partition p unless it holds unfinished rows,
// and returns how many it holds. The retention lock, held exclusively from
// the check until the detach has begun, keeps replays (which hold it
// shared) from reviving a row in between.
func (r *pruneRun) detachIfFinished(ctx context.Context, policy tablePolicy, p partition.Info) (unfinished int64, err error) {
	release, err := r.locks.exclusive(ctx, partition.RetentionLockKey(policy.table))
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, release()) }()
	if policy.unfinished != nil {
		unfinished, err = policy.unfinished(ctx, r.q, p.Day, p.Day.AddDate(0, 0, 1), r.now.Add(-r.m.cfg.DeadLetterRetention))
		if err != nil {
			return 0, fmt.Errorf("jobs: count unfinished rows of %s: %w", p.Name, err)
		}
	}
	if unfinished > 0 || r.dryRun {
		return unfinished, nil
	}
	return 0, r.detach(ctx, policy.table, p.Name, release)
}

// detach detaches parent's partition name with DETACH … CONCURRENTLY and
// calls release as soon as the detach has committed its first transaction
// (marking the partition pending): from then on no statement that starts
// can revive a row of it. The lock must not be held longer: the detach's
// second phase waits for every transaction that used parent, and a replay
// that used parent before asking for the lock would wait for it in turn,
// a deadlock that Postgres cannot see, since the lock is held by another
// connection than the one detaching.
func (r *pruneRun) detach(ctx context.Context, parent, name string, release func() error) error {
	done := make(chan error, 1)
	go func() { done <- partition.Detach(ctx, r.conn, parent, name) }()
	tick := time.NewTicker(detachPoll)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
		}
		started, err := partition.DetachStarted(ctx, r.locks.tx, parent, name)
		if err == nil && started {
			err = release()
		}
		if err != nil || started {
			return errors.Join(err, <-done)
		}
	}
}

// drop drops a detached partition (or, dry, reports that it would), even
// when ctx has ended.
func (r *pruneRun) drop(ctx context.Context, name string) error {
	if !r.dryRun {
		dropCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropTimeout)
		defer cancel()
		if err := partition.Drop(dropCtx, r.conn, name); err != nil {
			return err
		}
	}
	r.res.Dropped = append(r.res.Dropped, name)
	return nil
}

// rows prunes the non-partitioned tables and scrubs bodies, each in bounded
// batches.
func (r *pruneRun) rows(ctx context.Context) error {
	cfg := r.m.cfg
	keyCutoff := r.now.Add(-cfg.DedupeWindow)
	eventCutoff, deadCutoff := r.now.Add(-cfg.OutboxRetention), r.now.Add(-cfg.DeadLetterRetention)
	var err error

	// A key whose message a replay revives must not go: hold the inbox's
	// retention lock per batch.
	r.res.DedupeKeysDeleted, err = r.batches(ctx, inboxMessagesTable,
		func() (int64, error) { return r.q.RetentionInboxKeysExpiredCount(ctx, keyCutoff) },
		func(q *dbsqlc.Queries, batch int32) (int64, error) {
			return q.RetentionInboxKeysDelete(ctx, dbsqlc.RetentionInboxKeysDeleteParams{Cutoff: keyCutoff, BatchSize: batch})
		})
	if err != nil {
		return err
	}

	if r.dryRun { // a real run deleted them before taking its connection
		if r.res.IdempotencyKeysDeleted, err = r.q.RetentionIdempotencyExpiredCount(ctx, r.now); err != nil {
			return err
		}
	}

	r.res.DeliveriesDeleted, err = r.batches(ctx, outboxEventsTable,
		func() (int64, error) {
			return r.q.RetentionOutboxDeliveriesExpiredCount(ctx, dbsqlc.RetentionOutboxDeliveriesExpiredCountParams{
				Cutoff: eventCutoff, DeadCutoff: deadCutoff,
			})
		},
		func(q *dbsqlc.Queries, batch int32) (int64, error) {
			return q.RetentionOutboxDeliveriesDelete(ctx, dbsqlc.RetentionOutboxDeliveriesDeleteParams{
				Cutoff: eventCutoff, DeadCutoff: deadCutoff, BatchSize: batch,
			})
		})
	if err != nil || cfg.ScrubAfter == 0 {
		return err
	}

	scrubCutoff := r.now.Add(-cfg.ScrubAfter)
	// Only processed messages are scrubbed, which no replay revives.
	r.res.MessagesScrubbed, err = r.batches(ctx, "",
		func() (int64, error) { return r.q.RetentionInboxScrubCount(ctx, scrubCutoff) },
		func(q *dbsqlc.Queries, batch int32) (int64, error) {
			return q.RetentionInboxScrub(ctx, dbsqlc.RetentionInboxScrubParams{Now: r.now, Cutoff: scrubCutoff, BatchSize: batch})
		})
	if err != nil {
		return err
	}
	r.res.EventsScrubbed, err = r.batches(ctx, outboxEventsTable,
		func() (int64, error) { return r.q.RetentionOutboxScrubCount(ctx, scrubCutoff) },
		func(q *dbsqlc.Queries, batch int32) (int64, error) {
			return q.RetentionOutboxScrub(ctx, dbsqlc.RetentionOutboxScrubParams{Now: r.now, Cutoff: scrubCutoff, BatchSize: batch})
		})
	return err
}

// batchPauseFactor is the default pause after a batch, in multiples of the
// batch's own time: the pruner works at most a quarter of the time.
const batchPauseFactor = 3

// batches runs one batch of a DELETE or UPDATE per transaction until a
// batch comes back short, pausing between batches (Config.BatchPause), and
// returns the total; dry, it returns count() instead. With lockTable set,
// each batch holds that table's retention lock exclusively.
func (r *pruneRun) batches(ctx context.Context, lockTable string, count func() (int64, error),
	batch func(q *dbsqlc.Queries, size int32) (int64, error),
) (int64, error) {
	if r.dryRun {
		return count()
	}
	cfg := r.m.cfg
	var total int64
	for {
		start := time.Now()
		var n int64
		err := pgx.BeginFunc(ctx, r.conn, func(tx pgx.Tx) error {
			q := dbsqlc.New(tx)
			if lockTable != "" {
				if err := q.AdvisoryXactLock(ctx, dbsqlc.AdvisoryXactLockParams{
					Class: partition.LockClass(), Key: partition.RetentionLockKey(lockTable),
				}); err != nil {
					return err
				}
			}
			var err error
			n, err = batch(q, int32(cfg.BatchSize))
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < int64(cfg.BatchSize) {
			return total, nil
		}
		pause := cfg.BatchPause
		if pause == 0 {
			pause = min(batchPauseFactor*time.Since(start), time.Second)
		}
		if pause < 0 {
			pause = 0
		}
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(pause):
		}
	}
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
