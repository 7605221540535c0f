package pgxtx

import (
	"cmp"
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// GenericPlans is a DBTX whose Query and Exec run their statement with a
// generic plan, in the same round trip: they send, as one pipeline,
// PlanCacheModeGeneric (SET LOCAL plan_cache_mode = force_generic_plan,
// enable_seqscan = off and jit = off, keeping the values they had), the
// statement (its text prefixed, so that it is prepared apart from the same
// statement sent without), and PlanCacheModeRestore; so
// does QueryRow, whose row reads the rest of the pipeline when scanned.
// SendBatch is the wrapped DBTX's own. It wraps a
// transaction, or a pool or connection outside one: a pipeline outside a
// transaction runs as one implicit transaction, which the local setting
// ends with.
//
// Why: Postgres plans a prepared statement afresh on every execution when a
// custom plan looks cheaper than the generic one, as it does for statements
// on the day-partitioned messages (it prunes partitions by the parameters,
// and knows the arrays' lengths). Planning the ordering lookups, a lookup
// per message over every day partition, cost milliseconds per batch, more
// than the rest of it; planning a message's processed mark cost more than
// running it. Their generic plans prune partitions at run time. With up to
// about 100 day partitions (retention is at most 90 days) they cost no more
// to run than custom plans; with 400 they would cost 1.6× as much.
//
// A generic plan is kept until the tables' statistics change, so it is
// made with sequential scans off: one made while a table was nearly empty
// (River's job table on a new database, a new day's partition before
// midnight) would otherwise scan the whole table once it has grown. The
// statements run this way look rows up by key. A scan no index can replace
// would cost the planner's penalty for a disabled plan, far above
// jit_above_cost, hence jit off.
//
// Only a prepared statement keeps its generic plan: GenericPlans changes
// nothing on connections whose statements are not prepared and cached (a
// pgx default_query_exec_mode other than cache_statement, as behind
// PgBouncer), where a generic plan would be made, without pruning, on
// every call (see CachesPlans).
type GenericPlans struct{ DBTX }

var _ DBTX = GenericPlans{}

// CachesPlans reports whether db (a pgx.Tx, *pgx.Conn or *pgxpool.Pool)
// runs statements as prepared statements that it caches (pgx's
// QueryExecModeCacheStatement, its default), whose generic plans Postgres
// keeps. When it cannot tell, it reports false.
func CachesPlans(db any) bool {
	var mode pgx.QueryExecMode
	switch d := db.(type) {
	case interface{ Conn() *pgx.Conn }:
		conn := d.Conn()
		if conn == nil {
			return false
		}
		mode = conn.Config().DefaultQueryExecMode
	case interface{ Config() *pgx.ConnConfig }:
		mode = d.Config().DefaultQueryExecMode
	case interface{ Config() *pgxpool.Config }:
		mode = d.Config().ConnConfig.DefaultQueryExecMode
	default:
		return false
	}
	return mode == pgx.QueryExecModeCacheStatement
}

// QueueGeneric queues sql on b, with a generic plan when db (on which b
// will be sent) caches plans (see GenericPlans).
func QueueGeneric(b *pgx.Batch, db any, sql string, args ...any) {
	if !CachesPlans(db) {
		b.Queue(sql, args...)
		return
	}
	queueGeneric(b, sql, args...)
}

// genericPrefix marks the text of a statement sent with a generic plan, so
// that it is prepared apart from the same statement sent without (River's
// completer sends the one JobCompleteTx sends): Postgres keeps one generic
// plan per prepared statement, and with plan_cache_mode auto it makes one
// too after five runs, with sequential scans on, which force_generic_plan
// would then reuse.
const genericPrefix = "/* wharf: generic plan */ "

// queueGeneric queues sql on b between the plan-mode switch and its
// restore.
func queueGeneric(b *pgx.Batch, sql string, args ...any) {
	b.Queue(planCacheModeGeneric)
	b.Queue(genericPrefix+sql, args...)
	b.Queue(planCacheModeRestore)
}

// closed is err, and then the batch's closing error when it is another:
// after a failed statement, pgx's Close returns the same error again.
func closed(err error, br pgx.BatchResults) error {
	closeErr := br.Close()
	if err == nil || closeErr == nil || closeErr.Error() == err.Error() {
		return cmp.Or(err, closeErr)
	}
	return errors.Join(err, closeErr)
}

func (g GenericPlans) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !CachesPlans(g.DBTX) {
		return g.DBTX.Exec(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	queueGeneric(b, sql, args...)
	br := g.DBTX.SendBatch(ctx, b)
	_, err := br.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if err == nil {
		_, err = br.Exec()
	}
	return tag, closed(err, br)
}

func (g GenericPlans) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !CachesPlans(g.DBTX) {
		return g.DBTX.Query(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	queueGeneric(b, sql, args...)
	br := g.DBTX.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		return nil, closed(err, br)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, closed(err, br)
	}
	return &batchRows{Rows: rows, br: br, trailing: 1}, nil
}

func (g GenericPlans) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !CachesPlans(g.DBTX) {
		return g.DBTX.QueryRow(ctx, sql, args...)
	}
	rows, err := g.Query(ctx, sql, args...)
	return genericPlanRow{rows: rows, err: err}
}

// genericPlanRow is QueryRow's row: Scan reads the first row, as pgx's
// own does (pgx.ErrNoRows when there is none), then the rest of the
// pipeline.
type genericPlanRow struct {
	rows pgx.Rows
	err  error
}

func (r genericPlanRow) Scan(dest ...any) error {
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

// batchRows are a query's rows in a pipeline. Once they are read (Err,
// which sqlc's methods call after the last row, or Close), the rest of the
// pipeline is read too (trailing statements' results, then the batch is
// closed), and its error is theirs.
type batchRows struct {
	pgx.Rows
	br       pgx.BatchResults
	trailing int
	done     bool
	err      error
}

func (r *batchRows) finish() {
	if r.done {
		return
	}
	r.done = true
	r.Rows.Close()
	r.err = r.Rows.Err()
	for ; r.err == nil && r.trailing > 0; r.trailing-- {
		_, r.err = r.br.Exec()
	}
	r.err = closed(r.err, r.br)
}

// Err is meant for after the last row: it reads the rest of the pipeline.
func (r *batchRows) Err() error {
	r.finish()
	return r.err
}

func (r *batchRows) Close() { r.finish() }

// GenericTx is a pgx.Tx whose Query, QueryRow and Exec run their statement
// with a generic plan, as GenericPlans's do (on connections that cache
// plans), for statements that other libraries send through a pgx.Tx:
// River's JobCompleteTx, whose statement Postgres otherwise plans afresh
// on every call (a 0.46 ms plan for a 0.2 ms update of one job, measured
// with pg_stat_statements.track_planning). SendBatch, CopyFrom and the
// rest are the wrapped transaction's own. Unlike the transaction's own
// methods, they take no pgx.QueryExecMode or QueryResultFormats among
// their arguments (a pipeline's statements cannot), and an argument pgx
// cannot encode closes the connection.
type GenericTx struct{ pgx.Tx }

var _ pgx.Tx = GenericTx{}

func (t GenericTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return GenericPlans{DBTX: t.Tx}.Exec(ctx, sql, args...)
}

func (t GenericTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return GenericPlans{DBTX: t.Tx}.Query(ctx, sql, args...)
}

func (t GenericTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return GenericPlans{DBTX: t.Tx}.QueryRow(ctx, sql, args...)
}
