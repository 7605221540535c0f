package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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

// beforeFinalize is called before a prune completes an interrupted detach;
// tests use it to place a second prune there.
var beforeFinalize = func() {}

// dropTimeout bounds the DROP that follows a DETACH. It runs even when the
// job's context ends, so that a detached table is not left behind.
const dropTimeout = time.Minute

// pruneLease names the lease one prune at a time holds.
const pruneLease = "wharf.jobs.prune"

// pruneLeaseTTL is how long a prune's lease lasts without renewal: a run
// renews it before each partition, and one whose process died frees it
// after this.
const pruneLeaseTTL = 10 * time.Minute

// pruneRun is one retention run. Everything it does runs on one connection:
// a run never waits for a second pooled connection while it holds a lock
// that the pool's other holders (replays) may be waiting for. It holds no
// lock across a DETACH … CONCURRENTLY, which waits for every transaction
// touching the table, and no session state: it works through a
// transaction-mode pooler.
type pruneRun struct {
	m      *Maintainer
	conn   *pgx.Conn
	q      *dbsqlc.Queries
	holder uuid.UUID // of the prune lease; zero in a dry run
	now    time.Time
	dryRun bool
	res    *PruneResult
}

// Prune drops expired partitions whose rows are all finished (and tables
// left detached by an interrupted run), defers the others, then prunes the
// narrow tables in batches and scrubs bodies. One run at a time holds the
// prune lease: a run that finds it held (another node's, the CLI's) does
// nothing and returns a result with Skipped set. A dry run takes no lease.
func (m *Maintainer) Prune(ctx context.Context, opts *PruneOpts) (*PruneResult, error) {
	if opts == nil {
		opts = &PruneOpts{}
	}
	res := &PruneResult{DryRun: opts.DryRun, Dropped: []string{}, Deferred: []DeferredPartition{}}
	if !opts.DryRun {
		// Before taking a connection for the run: DeleteExpired uses the
		// pool, and is safe alongside anything (it skips locked keys).
		n, err := idempotency.DeleteExpired(ctx, m.pool, m.cfg.BatchSize)
		res.IdempotencyKeysDeleted = int64(n)
		if err != nil {
			m.logPrune(ctx, res, err)
			return res, err
		}
	}
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return res, err
	}
	defer conn.Release()
	r := &pruneRun{m: m, conn: conn.Conn(), q: dbsqlc.New(conn), dryRun: opts.DryRun, res: res}
	if !r.dryRun {
		if r.holder, err = uuid.NewV7(); err != nil {
			return res, err
		}
		taken, err := r.renewLease(ctx)
		if err != nil {
			m.logPrune(ctx, res, err)
			return res, err
		}
		if !taken {
			res.Skipped = true
			m.cfg.Logger.InfoContext(ctx, "wharf: prune skipped: another prune is running")
			return res, nil
		}
		defer r.releaseLease(ctx, conn)
	}
	r.now = m.cfg.Now()
	for _, policy := range tablePolicies {
		if err = r.table(ctx, policy); err != nil {
			break
		}
	}
	if err == nil {
		err = r.rows(ctx)
	}
	m.logPrune(ctx, res, err)
	return res, err
}

// renewLease takes or renews the prune lease, reporting whether this run
// holds it.
func (r *pruneRun) renewLease(ctx context.Context) (bool, error) {
	_, err := r.q.LeaseTake(ctx, dbsqlc.LeaseTakeParams{Name: pruneLease, Holder: r.holder, TtlSeconds: pruneLeaseTTL.Seconds()})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("jobs: prune lease: %w", err)
	}
	return true, nil
}

// releaseLease frees the prune lease, even when ctx has ended; if that
// fails, the lease expires by itself. It goes through the run's connection
// while that is usable: the run never waits for a second pooled
// connection, which a small pool (or one the workers hold) may not give.
// A statement interrupted by ctx's end (a DETACH … CONCURRENTLY waiting for
// long transactions) closes that connection: then the run gives it back
// first and releases the lease through the pool, since a lease left behind
// would make every prune skip until it expires.
func (r *pruneRun) releaseLease(ctx context.Context, conn *pgxpool.Conn) {
	releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	db := dbsqlc.DBTX(conn)
	if conn.Conn().IsClosed() {
		conn.Release()
		db = r.m.pool
	}
	if err := dbsqlc.New(db).LeaseRelease(releaseCtx, dbsqlc.LeaseReleaseParams{Name: pruneLease, Holder: r.holder}); err != nil {
		r.m.cfg.Logger.WarnContext(ctx, "wharf: releasing the prune lease failed; it expires by itself", "error", err)
	}
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
			if err := r.drop(ctx, policy.table, p); err != nil {
				return err
			}
		}
	}
	// A detach left pending by an interrupted run first: while one is
	// pending, Postgres refuses to detach any other partition of the table.
	for _, p := range parts {
		if !expired(p) || !p.DetachPending {
			continue
		}
		if !r.dryRun {
			if err := r.keepLease(ctx); err != nil {
				return err
			}
			beforeFinalize()
			if err := partition.Finalize(ctx, r.conn, policy.table, p.Name); err != nil {
				return err
			}
		}
		if err := r.drop(ctx, policy.table, p); err != nil {
			return err
		}
	}
	for _, p := range parts {
		if !expired(p) || p.DetachPending {
			continue
		}
		if !r.dryRun {
			if err := r.keepLease(ctx); err != nil {
				return err
			}
		}
		unfinished, err := r.markIfFinished(ctx, policy, p)
		if err != nil {
			return err
		}
		if unfinished > 0 {
			r.res.Deferred = append(r.res.Deferred, DeferredPartition{Name: p.Name, Unfinished: unfinished})
			r.m.cfg.Logger.WarnContext(ctx, "wharf: expired partition kept for unfinished rows",
				"partition", p.Name, "unfinished", unfinished)
			continue
		}
		if !r.dryRun {
			// No lock held: DETACH … CONCURRENTLY waits for every
			// transaction touching the table, long handlers included, and
			// replays must not wait behind it. They see the mark instead.
			if err := partition.Detach(ctx, r.conn, policy.table, p.Name); err != nil {
				return err
			}
		}
		if err := r.drop(ctx, policy.table, p); err != nil {
			return err
		}
	}
	return nil
}

// keepLease renews the prune lease, failing the run if another prune has
// taken it meanwhile (this one outlived its lease).
func (r *pruneRun) keepLease(ctx context.Context) error {
	held, err := r.renewLease(ctx)
	if err != nil {
		return err
	}
	if !held {
		return errors.New("jobs: prune lease lost to another prune; stopping")
	}
	return nil
}

// markIfFinished counts the unfinished rows of partition p and, when there
// are none, marks p as being dropped, and returns the count. The retention
// lock, held exclusively for that transaction, keeps replays (which hold it
// shared and then check the mark) from reviving a row in between; once the
// mark commits, replays of p's rows are refused.
func (r *pruneRun) markIfFinished(ctx context.Context, policy tablePolicy, p partition.Info) (unfinished int64, err error) {
	err = pgx.BeginFunc(ctx, r.conn, func(tx pgx.Tx) error {
		q := dbsqlc.New(tx)
		if err := q.AdvisoryXactLock(ctx, dbsqlc.AdvisoryXactLockParams{
			Class: partition.LockClass(), Key: partition.RetentionLockKey(policy.table),
		}); err != nil {
			return err
		}
		if policy.unfinished != nil {
			unfinished, err = policy.unfinished(ctx, q, p.Day, p.Day.AddDate(0, 0, 1), r.now.Add(-r.m.cfg.DeadLetterRetention))
			if err != nil {
				return fmt.Errorf("jobs: count unfinished rows of %s: %w", p.Name, err)
			}
		}
		if unfinished > 0 || r.dryRun {
			return nil
		}
		return q.PartitionDropMark(ctx, dbsqlc.PartitionDropMarkParams{Parent: policy.table, Day: p.Day})
	})
	return unfinished, err
}

// drop drops a detached partition and clears its mark (or, dry, reports
// that it would), even when ctx has ended.
func (r *pruneRun) drop(ctx context.Context, parent string, p partition.Info) error {
	if !r.dryRun {
		dropCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropTimeout)
		defer cancel()
		if err := partition.Drop(dropCtx, r.conn, p.Name); err != nil {
			return err
		}
		if err := r.q.PartitionDropUnmark(dropCtx, dbsqlc.PartitionDropUnmarkParams{Parent: parent, Day: p.Day}); err != nil {
			return fmt.Errorf("jobs: unmark %s: %w", p.Name, err)
		}
	}
	r.res.Dropped = append(r.res.Dropped, p.Name)
	return nil
}

// rows prunes the non-partitioned tables and scrubs bodies, each in bounded
// batches.
func (r *pruneRun) rows(ctx context.Context) error {
	cfg := r.m.cfg
	keyCutoff, erasedCutoff := r.now.Add(-cfg.DedupeWindow), r.now.Add(-cfg.ErasedKeyRetention)
	eventCutoff, deadCutoff := r.now.Add(-cfg.OutboxRetention), r.now.Add(-cfg.DeadLetterRetention)
	var err error

	// A key whose message a replay revives must not go: hold the inbox's
	// retention lock per batch.
	r.res.DedupeKeysDeleted, err = r.batches(ctx, inboxMessagesTable,
		func() (int64, error) {
			return r.q.RetentionInboxKeysExpiredCount(ctx, dbsqlc.RetentionInboxKeysExpiredCountParams{
				Cutoff: keyCutoff, ErasedCutoff: erasedCutoff,
			})
		},
		func(q *dbsqlc.Queries, batch int32) (int64, error) {
			return q.RetentionInboxKeysDelete(ctx, dbsqlc.RetentionInboxKeysDeleteParams{
				Cutoff: keyCutoff, ErasedCutoff: erasedCutoff, BatchSize: batch,
			})
		})
	if err != nil {
		return err
	}
	pastCutoff := r.now.Add(-cfg.InboxRetention)
	r.res.PastKeysDeleted, err = r.batches(ctx, "",
		func() (int64, error) { return r.q.RetentionInboxPastKeysExpiredCount(ctx, pastCutoff) },
		func(q *dbsqlc.Queries, batch int32) (int64, error) {
			return q.RetentionInboxPastKeysDelete(ctx, dbsqlc.RetentionInboxPastKeysDeleteParams{Cutoff: pastCutoff, BatchSize: batch})
		})
	if err != nil {
		return err
	}

	if r.dryRun { // a real run deleted them before taking its connection
		if r.res.IdempotencyKeysDeleted, err = r.q.RetentionIdempotencyExpiredCount(ctx); err != nil {
			return err
		}
	}

	auditCutoff := r.now.Add(-cfg.AuditRetention)
	r.res.AuditEntriesDeleted, err = r.batches(ctx, "",
		func() (int64, error) { return r.q.RetentionAuditExpiredCount(ctx, auditCutoff) },
		func(q *dbsqlc.Queries, batch int32) (int64, error) {
			return q.RetentionAuditDelete(ctx, dbsqlc.RetentionAuditDeleteParams{Cutoff: auditCutoff, BatchSize: batch})
		})
	if err != nil {
		return err
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
	if err != nil {
		return err
	}
	r.res.ResponsesScrubbed, err = r.batches(ctx, "",
		func() (int64, error) { return r.q.RetentionAttemptResponsesScrubCount(ctx, scrubCutoff) },
		func(q *dbsqlc.Queries, batch int32) (int64, error) {
			return q.RetentionAttemptResponsesScrub(ctx, dbsqlc.RetentionAttemptResponsesScrubParams{Cutoff: scrubCutoff, BatchSize: batch})
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
	if m.metrics != nil {
		m.metrics.prune(ctx, res, err)
	}
	attrs := []any{"dry_run", res.DryRun, "skipped", res.Skipped, "dropped", res.Dropped, "deferred", len(res.Deferred),
		"dedupe_keys_deleted", res.DedupeKeysDeleted, "past_keys_deleted", res.PastKeysDeleted, "idempotency_keys_deleted", res.IdempotencyKeysDeleted,
		"deliveries_deleted", res.DeliveriesDeleted, "audit_entries_deleted", res.AuditEntriesDeleted, "messages_scrubbed", res.MessagesScrubbed, "events_scrubbed", res.EventsScrubbed,
		"responses_scrubbed", res.ResponsesScrubbed}
	if err != nil {
		m.cfg.Logger.ErrorContext(ctx, "wharf: prune failed", append(attrs, "error", err)...)
		return
	}
	m.cfg.Logger.InfoContext(ctx, "wharf: prune done", attrs...)
}
