package process

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/wharfhq/wharf/internal/pgxtx"
)

// ErrHandlerEndedTx is returned by the Commit and Rollback of the
// transaction a handler gets: only the worker may end it, since it also
// holds the message's processed mark and its job's completion. Package
// inbox exports it as inbox.ErrHandlerEndedTx.
var ErrHandlerEndedTx = errors.New("inbox: a Handler must not commit or roll back its transaction; return nil or an error instead")

// handlerTx is the worker's transaction as a Handler sees it: everything
// but ending it. In a batch it also opens the handler's savepoint and marks
// its message processed inside it, lazily: both in one round trip of their
// own before the handler's first statement (never pipelined with it: a
// statement of the handler's that fails to parse or to encode its
// arguments must not take the batch with it). A handler that never touches
// the database needs neither; its message is marked with the batch's
// others at the end.
type handlerTx struct {
	pgx.Tx
	sp *savepoints // nil outside a batch
}

func (handlerTx) Commit(context.Context) error   { return ErrHandlerEndedTx }
func (handlerTx) Rollback(context.Context) error { return ErrHandlerEndedTx }

func (t handlerTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.sp.take(ctx, t.Tx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.Tx.Exec(ctx, sql, args...)
}

func (t handlerTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.sp.take(ctx, t.Tx); err != nil {
		return errRows{err: err, conn: t.Tx.Conn()}, err // never nil, as pgx's
	}
	return t.Tx.Query(ctx, sql, args...)
}

func (t handlerTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.sp.take(ctx, t.Tx); err != nil {
		return errRow{err}
	}
	return t.Tx.QueryRow(ctx, sql, args...)
}

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

// LargeObjects and Conn cannot return an error: their savepoint is taken
// even when the batch's context is done (the handler may go on with a
// context of its own), and a failure breaks the batch, so that nothing the
// handler does through them can commit without its message's mark.

func (t handlerTx) LargeObjects() pgx.LargeObjects {
	t.sp.takeDetached(t.Tx)
	return t.Tx.LargeObjects()
}

func (t handlerTx) Conn() *pgx.Conn {
	t.sp.takeDetached(t.Tx)
	return t.Tx.Conn()
}

// savepoints tracks the savepoints of a batch's handlers. Each handler gets
// one, taken before its first statement together with its message's
// processed mark, so that the mark commits exactly with the handler's
// writes, whatever the handler does to the transaction, and a failure rolls
// both back; the next handler's savepoint releases it.
type savepoints struct {
	ctx     context.Context // the batch's
	mark    pgxtx.Statement // the current handler's processed mark: one message's, or a group's
	pending bool            // the current handler's savepoint is not taken yet
	taken   bool            // the current handler's savepoint is taken
	held    bool            // a savepoint (the current handler's or an earlier one's) is open
	broken  error           // the transaction was lost taking a savepoint
}

const (
	savepointSQL        = "SAVEPOINT wharf_handler"
	releaseSavepointSQL = "RELEASE SAVEPOINT wharf_handler"
	undoSavepointSQL    = "ROLLBACK TO SAVEPOINT wharf_handler"
)

// start readies the savepoint of the next handler (or BatchHandler call),
// with mark, its messages' processed mark (InboxMessageMarkProcessed or
// InboxMessagesMarkProcessed, captured: it goes in the savepoint's round
// trip).
func (s *savepoints) start(mark pgxtx.Statement) {
	s.mark, s.pending, s.taken = mark, true, false
}

func (s *savepoints) context() context.Context {
	if s == nil || s.ctx == nil {
		return context.Background()
	}
	return s.ctx
}

// take takes the savepoint and writes the mark, in one round trip, if the
// savepoint is due. A failure that left the transaction usable (nothing was
// sent: the context was done) is the handler's error, and the savepoint is
// still due; any other loses the transaction.
func (s *savepoints) take(ctx context.Context, tx pgx.Tx) error {
	if s == nil || !s.pending {
		return nil
	}
	b := &pgx.Batch{}
	if s.held {
		b.Queue(releaseSavepointSQL)
	}
	b.Queue(savepointSQL)
	// The mark has a generic plan (see pgxtx.GenericPlans).
	pgxtx.QueueGeneric(b, tx, s.mark.SQL, s.mark.Args...)
	err := tx.SendBatch(ctx, b).Close()
	if err == nil {
		s.pending, s.taken, s.held = false, true, true
		return nil
	}
	if tx.Conn().PgConn().TxStatus() != 'T' {
		s.pending, s.broken = false, err
	}
	return err
}

// takeDetached takes the savepoint, if due, whatever the batch's context,
// and breaks the batch if it cannot.
func (s *savepoints) takeDetached(tx pgx.Tx) {
	if s == nil || !s.pending {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.context()), detachedTakeTimeout)
	defer cancel()
	if err := s.take(ctx, tx); err != nil && s.broken == nil {
		s.pending, s.broken = false, err
	}
}

// detachedTakeTimeout bounds takeDetached.
const detachedTakeTimeout = 10 * time.Second

// undo rolls the current handler's writes and its message's mark back, if
// it made any.
func (s *savepoints) undo(ctx context.Context, tx pgx.Tx) error {
	if !s.taken {
		return nil
	}
	_, err := tx.Exec(ctx, undoSavepointSQL)
	return err
}

// errRow is QueryRow's answer when the savepoint could not be taken.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// failedBatch is SendBatch's answer when the savepoint could not be taken.
type failedBatch struct{ err error }

func (b failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b failedBatch) Query() (pgx.Rows, error)         { return errRows{err: b.err}, b.err }
func (b failedBatch) QueryRow() pgx.Row                { return errRow{b.err} }
func (b failedBatch) Close() error                     { return b.err }
func (b failedBatch) Tx() pgx.Tx                       { return nil }

// errRows is Query's answer when the savepoint could not be taken: like
// pgx's own, it is never nil and repeats the error.
type errRows struct {
	err  error
	conn *pgx.Conn
}

func (r errRows) Close()                                       {}
func (r errRows) Err() error                                   { return r.err }
func (r errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r errRows) Next() bool                                   { return false }
func (r errRows) Scan(...any) error                            { return r.err }
func (r errRows) Values() ([]any, error)                       { return nil, r.err }
func (r errRows) RawValues() [][]byte                          { return nil }
func (r errRows) Conn() *pgx.Conn                              { return r.conn }

func (r errRows) TypeMap() *pgtype.Map {
	if r.conn == nil {
		return pgtype.NewMap()
	}
	return r.conn.TypeMap()
}
