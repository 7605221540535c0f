package pgxtx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PipelinedTx is a transaction that saves round trips: its BEGIN and its
// Execs are held, and sent in one pipeline with the next statement whose
// rows are needed (Query, QueryRow, SendBatch) or with its COMMIT. A
// transaction of a query, an insert whose rows are read back and an insert
// that returns nothing then costs three round trips, not five.
//
// The price is that Exec cannot report its own outcome: it returns an
// empty command tag and a nil error, and a failure of its statement is the
// error of the call that sends it (Commit, at the latest), after which the
// transaction is lost, as it would be anyway. So PipelinedTx is only for
// code that needs no Exec's command tag and treats any error as the end of
// the transaction: Wharf's own receive batches (ReceiveManyTx, River's
// InsertManyTx). Whatever the caller does with that error, a transaction
// in which a held statement (BEGIN included) failed never commits: every
// later call, Commit included, fails with it. Savepoints (Begin) and
// LargeObjects are not supported.
// Statements are pipelined as they come, so an argument that pgx cannot
// encode fails the whole pipeline (see GenericTx); the statements sent
// through PipelinedTx take only arguments their callers built.
type PipelinedTx struct {
	conn   *pgx.Conn
	held   []heldExec // BEGIN first, until it is sent
	begun  bool       // BEGIN was sent
	ended  bool       // committed or rolled back
	broken error      // a held statement failed: the transaction cannot commit
}

var _ pgx.Tx = (*PipelinedTx)(nil)

// heldExec is a statement waiting to be sent.
type heldExec struct {
	sql  string
	args []any
}

// errSavepoints is Begin's error.
var errSavepoints = errors.New("pgxtx: a pipelined transaction takes no savepoints")

// RunPipelined runs fn in a PipelinedTx on a connection of pool and commits
// it when fn returns nil; otherwise it rolls back and returns fn's error.
// A connection left in a transaction by a failure is closed, never reused.
func RunPipelined(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release() // discards a connection still in a transaction
	// READ COMMITTED whatever the role's default_transaction_isolation:
	// the receive batch's claim must see what commits while it waits (a
	// late arrival's past key, see queries/inbox.sql InboxKeyClaimMany).
	tx := &PipelinedTx{conn: conn.Conn(), held: []heldExec{{sql: "begin isolation level read committed"}}}
	defer func() {
		if !tx.ended {
			// fn panicked: roll back, whatever its context.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
			defer cancel()
			_ = tx.Rollback(rctx)
		}
	}()
	if err := fn(tx); err != nil {
		if rerr := tx.Rollback(ctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
			return errors.Join(err, fmt.Errorf("roll back: %w", rerr))
		}
		return err
	}
	return tx.Commit(ctx)
}

// rollbackTimeout bounds the rollback after a panic.
const rollbackTimeout = 5 * time.Second

// usable returns why no statement may be sent, if none may.
func (t *PipelinedTx) usable() error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	if t.broken != nil {
		return fmt.Errorf("pgxtx: an earlier statement of the transaction failed: %w", t.broken)
	}
	return nil
}

// Exec holds sql until the next statement whose result is needed, or the
// commit; it returns an empty tag and a nil error (see PipelinedTx).
func (t *PipelinedTx) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.usable(); err != nil {
		return pgconn.CommandTag{}, err
	}
	t.held = append(t.held, heldExec{sql: sql, args: args})
	return pgconn.CommandTag{}, nil
}

// SendBatch sends the held statements, then b, in one pipeline; the
// results are b's, each failing with a held statement's error if one
// failed.
func (t *PipelinedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.usable(); err != nil {
		return &pipelinedResults{err: err}
	}
	if len(t.held) == 0 {
		return t.conn.SendBatch(ctx, b)
	}
	all := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(t.held)+b.Len())}
	for _, h := range t.held {
		all.Queue(h.sql, h.args...)
	}
	all.QueuedQueries = append(all.QueuedQueries, b.QueuedQueries...)
	held := len(t.held)
	t.held, t.begun = nil, true
	return &pipelinedResults{BatchResults: t.conn.SendBatch(ctx, all), held: held, tx: t}
}

func (t *PipelinedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	if len(t.held) == 0 {
		return t.conn.Query(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := t.SendBatch(ctx, b)
	rows, err := br.Query()
	if err != nil {
		return nil, closed(err, br)
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (t *PipelinedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return genericPlanRow{rows: rows, err: err}
}

// CopyFrom sends the held statements first.
func (t *PipelinedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.flush(ctx); err != nil {
		return 0, err
	}
	return t.conn.CopyFrom(ctx, table, columns, src)
}

// flush sends the held statements, if any.
func (t *PipelinedTx) flush(ctx context.Context) error {
	if err := t.usable(); err != nil {
		return err
	}
	if len(t.held) == 0 {
		return nil
	}
	return t.SendBatch(ctx, &pgx.Batch{}).Close()
}

// Commit sends the held statements and COMMIT in one pipeline. When
// nothing but BEGIN is held, nothing was sent and there is nothing to
// commit. A transaction in which a held statement failed is rolled back,
// and Commit returns that failure.
func (t *PipelinedTx) Commit(ctx context.Context) error {
	if err := t.usable(); err != nil {
		if t.ended {
			return err
		}
		// Broken: roll back what was sent.
		if rerr := t.Rollback(ctx); rerr != nil {
			return errors.Join(err, fmt.Errorf("roll back: %w", rerr))
		}
		return err
	}
	if !t.begun && len(t.held) <= 1 {
		t.held, t.ended = nil, true
		return nil
	}
	b := &pgx.Batch{}
	b.Queue("commit")
	br := t.SendBatch(ctx, b)
	tag, err := br.Exec()
	err = closed(err, br)
	t.ended = true
	if err == nil && tag.String() == "ROLLBACK" {
		err = pgx.ErrTxCommitRollback
	}
	if err != nil {
		t.abandon(ctx)
	}
	return err
}

// Rollback rolls back what was sent; held statements are dropped.
func (t *PipelinedTx) Rollback(ctx context.Context) error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	t.held, t.ended = nil, true
	if !t.begun {
		return nil
	}
	_, err := t.conn.Exec(ctx, "rollback")
	if err != nil {
		t.abandon(ctx)
	}
	return err
}

// abandon closes the connection if it is still in a transaction, so that
// the pool never hands it out again (as pgx's own transactions do).
func (t *PipelinedTx) abandon(ctx context.Context) {
	if t.conn.PgConn().TxStatus() != 'I' {
		_ = t.conn.Close(ctx)
	}
}

func (t *PipelinedTx) Begin(context.Context) (pgx.Tx, error) { return nil, errSavepoints }

// LargeObjects is not supported: its zero value panics on use.
func (t *PipelinedTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

func (t *PipelinedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	return t.conn.Prepare(ctx, name, sql)
}

// Conn is the transaction's connection. A statement sent on it directly
// goes before the held ones, BEGIN included.
func (t *PipelinedTx) Conn() *pgx.Conn { return t.conn }

// pipelinedResults are a batch's results after the held statements'.
type pipelinedResults struct {
	pgx.BatchResults
	held int          // held statements' results still to read
	err  error        // the first failure among them, or why nothing was sent
	tx   *PipelinedTx // broken by such a failure
}

// skipHeld reads the held statements' results, once. A failure breaks the
// transaction: whether or not its BEGIN reached the server, nothing more
// may be sent in it, and it cannot commit.
func (r *pipelinedResults) skipHeld() error {
	for r.err == nil && r.held > 0 {
		r.held--
		if _, r.err = r.BatchResults.Exec(); r.err != nil && r.tx.broken == nil {
			r.tx.broken = r.err
		}
	}
	return r.err
}

func (r *pipelinedResults) Exec() (pgconn.CommandTag, error) {
	if err := r.skipHeld(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return r.BatchResults.Exec()
}

func (r *pipelinedResults) Query() (pgx.Rows, error) {
	if err := r.skipHeld(); err != nil {
		return nil, err
	}
	return r.BatchResults.Query()
}

func (r *pipelinedResults) QueryRow() pgx.Row {
	if err := r.skipHeld(); err != nil {
		return genericPlanRow{err: err}
	}
	return r.BatchResults.QueryRow()
}

func (r *pipelinedResults) Close() error {
	if r.BatchResults == nil {
		return r.err
	}
	return closed(r.skipHeld(), r.BatchResults)
}
