package inbox

import (
	"context"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrHandlerEndedTx is returned by the Commit and Rollback of the
// transaction a Handler gets: only the worker may end it, since it also
// holds the message's processed mark and its job's completion.
var ErrHandlerEndedTx = errors.New("inbox: a Handler must not commit or roll back its transaction; return nil or an error instead")

// handlerTx is the worker's transaction as a Handler sees it: everything
// but ending it. In a batch it also takes the handler's savepoint, lazily:
// the savepoint statements travel in one pipeline with the handler's first
// statement (one round trip, not two), and a handler that never touches the
// database needs none.
type handlerTx struct {
	pgx.Tx
	sp *savepoints // nil outside a batch
}

func (handlerTx) Commit(context.Context) error   { return ErrHandlerEndedTx }
func (handlerTx) Rollback(context.Context) error { return ErrHandlerEndedTx }

func (t handlerTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !t.sp.due() {
		return t.Tx.Exec(ctx, sql, args...)
	}
	br, err := t.sp.send(ctx, t.Tx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	return tag, errors.Join(err, br.Close())
}

func (t handlerTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !t.sp.due() {
		return t.Tx.Query(ctx, sql, args...)
	}
	br, err := t.sp.send(ctx, t.Tx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, errors.Join(err, br.Close())
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (t handlerTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !t.sp.due() {
		return t.Tx.QueryRow(ctx, sql, args...)
	}
	rows, err := t.Query(ctx, sql, args...)
	return &batchRow{rows: rows, err: err}
}

// The other ways to reach the database take the savepoint in a round trip
// of its own first.

func (t handlerTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.sp.take(ctx, t.Tx); err != nil {
		return nil, err
	}
	return t.Tx.Begin(ctx)
}

func (t handlerTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.sp.take(ctx, t.Tx); err != nil {
		return 0, err
	}
	return t.Tx.CopyFrom(ctx, table, columns, src)
}

func (t handlerTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.sp.take(ctx, t.Tx); err != nil {
		return failedBatch{err}
	}
	return t.Tx.SendBatch(ctx, b)
}

func (t handlerTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.sp.take(ctx, t.Tx); err != nil {
		return nil, err
	}
	return t.Tx.Prepare(ctx, name, sql)
}

func (t handlerTx) LargeObjects() pgx.LargeObjects {
	_ = t.sp.take(context.Background(), t.Tx) // a failure breaks the batch (sp.broken)
	return t.Tx.LargeObjects()
}

func (t handlerTx) Conn() *pgx.Conn {
	_ = t.sp.take(context.Background(), t.Tx) // a failure breaks the batch (sp.broken)
	return t.Tx.Conn()
}

// savepoints tracks the savepoint of a batch's handlers. Each handler gets
// one, taken before its first statement; the next handler's releases it.
type savepoints struct {
	pending bool  // the current handler's savepoint is not taken yet
	taken   bool  // the current handler's savepoint is taken
	held    bool  // a savepoint (the current handler's or an earlier one's) is open
	broken  error // taking a savepoint failed: the transaction is lost
}

const (
	savepointSQL        = "SAVEPOINT wharf_handler"
	releaseSavepointSQL = "RELEASE SAVEPOINT wharf_handler"
	undoSavepointSQL    = "ROLLBACK TO SAVEPOINT wharf_handler"
)

// start readies the savepoint of the next handler.
func (s *savepoints) start() { s.pending, s.taken = true, false }

// due reports whether the savepoint must be taken before the next statement.
func (s *savepoints) due() bool { return s != nil && s.pending }

// queue adds the savepoint statements to b and returns how many it added.
func (s *savepoints) queue(b *pgx.Batch) int {
	if s.held {
		b.Queue(releaseSavepointSQL)
		b.Queue(savepointSQL)
		return 2
	}
	b.Queue(savepointSQL)
	return 1
}

// send pipelines the savepoint statements with the query sql and returns
// the results, the savepoint's read; on error the results are closed.
func (s *savepoints) send(ctx context.Context, tx pgx.Tx, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	n := s.queue(b)
	b.Queue(sql, args...)
	br := tx.SendBatch(ctx, b)
	if err := s.read(br, n); err != nil {
		return nil, errors.Join(err, br.Close())
	}
	return br, nil
}

// take takes the savepoint now, if it is due.
func (s *savepoints) take(ctx context.Context, tx pgx.Tx) error {
	if !s.due() {
		return nil
	}
	b := &pgx.Batch{}
	n := s.queue(b)
	br := tx.SendBatch(ctx, b)
	err := s.read(br, n)
	return errors.Join(err, br.Close())
}

// read reads the results of n savepoint statements.
func (s *savepoints) read(br pgx.BatchResults, n int) error {
	s.pending = false
	for range n {
		if _, err := br.Exec(); err != nil {
			s.broken = err
			return err
		}
	}
	s.taken, s.held = true, true
	return nil
}

// undo rolls the current handler's writes back, if it made any.
func (s *savepoints) undo(ctx context.Context, tx pgx.Tx) error {
	if !s.taken {
		return nil
	}
	_, err := tx.Exec(ctx, undoSavepointSQL)
	return err
}

// batchRows are rows read from a pipeline: the pipeline closes with them.
type batchRows struct {
	pgx.Rows
	br       pgx.BatchResults
	once     sync.Once
	closeErr error
}

func (r *batchRows) closeBatch() {
	r.once.Do(func() { r.closeErr = r.br.Close() })
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.closeBatch()
	return false
}

func (r *batchRows) Close() {
	r.Rows.Close()
	r.closeBatch()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.closeErr
}

// batchRow is QueryRow's answer over batchRows, scanning as pgx's does.
type batchRow struct {
	rows pgx.Rows
	err  error
}

func (r *batchRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// failedBatch is SendBatch's answer when the savepoint could not be taken.
type failedBatch struct{ err error }

func (b failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b failedBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b failedBatch) QueryRow() pgx.Row                { return &batchRow{err: b.err} }
func (b failedBatch) Close() error                     { return b.err }
func (b failedBatch) Tx() pgx.Tx                       { return nil }
