package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/partition"
)

// runLocks holds a prune run's advisory locks. They are transaction locks,
// taken in one transaction that stays open for the run on a connection of
// its own: a session lock would not survive PgBouncer in transaction mode
// (each statement may reach a different server connection, and a lock
// left on one blocks every later run), while an open transaction keeps
// its server connection, and the locks go with it when the transaction
// ends, the connection closes or the process dies.
//
// The connection is taken from the pool and hijacked, so that it no
// longer counts against the pool: the run's work connection, acquired
// afterwards, never waits for a pooled connection that the lock holder
// itself keeps.
type runLocks struct {
	conn *pgx.Conn
	tx   pgx.Tx
	q    *dbsqlc.Queries
}

// lockRun opens the run's lock transaction and takes key in it, waiting for
// a concurrent holder to finish.
func lockRun(ctx context.Context, pool *pgxpool.Pool, key int32) (*runLocks, error) {
	pooled, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	conn := pooled.Hijack()
	tx, err := conn.Begin(ctx)
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	l := &runLocks{conn: conn, tx: tx, q: dbsqlc.New(tx)}
	if err := l.q.AdvisoryXactLock(ctx, dbsqlc.AdvisoryXactLockParams{Class: partition.LockClass(), Key: key}); err != nil {
		l.close(ctx)
		return nil, err
	}
	return l, nil
}

// exclusive takes key until release is called (or the run ends), in a
// savepoint of the lock transaction: rolling the savepoint back releases
// the lock and keeps the run's. release may be called more than once.
func (l *runLocks) exclusive(ctx context.Context, key int32) (release func() error, err error) {
	sp, err := l.tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	released := false
	release = func() error {
		if released {
			return nil
		}
		released = true
		return sp.Rollback(context.WithoutCancel(ctx))
	}
	if err := dbsqlc.New(sp).AdvisoryXactLock(ctx, dbsqlc.AdvisoryXactLockParams{Class: partition.LockClass(), Key: key}); err != nil {
		return nil, errors.Join(err, release())
	}
	return release, nil
}

// close ends the lock transaction and closes its connection, which
// releases every lock even when the rollback cannot be sent.
func (l *runLocks) close(ctx context.Context) {
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = l.tx.Rollback(closeCtx)
	_ = l.conn.Close(closeCtx)
}
