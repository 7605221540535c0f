package dbsqlc

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// This file is not generated.

// GenericPlans is a DBTX whose Query and Exec run their statement with a
// generic plan, in the same round trip: they send, as one pipeline,
// PlanCacheModeGeneric (SET LOCAL plan_cache_mode = force_generic_plan,
// keeping the mode it had), the statement, and PlanCacheModeRestore; so
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
// running it. Their generic plans prune partitions at run time.
type GenericPlans struct{ DBTX }

var _ DBTX = GenericPlans{}

// QueueGeneric queues sql, with a generic plan, on b (see GenericPlans).
func QueueGeneric(b *pgx.Batch, sql string, args ...any) {
	b.Queue(PlanCacheModeGenericSQL)
	b.Queue(sql, args...)
	b.Queue(PlanCacheModeRestoreSQL)
}

func (g GenericPlans) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	b := &pgx.Batch{}
	QueueGeneric(b, sql, args...)
	br := g.DBTX.SendBatch(ctx, b)
	_, err := br.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if err == nil {
		_, err = br.Exec()
	}
	return tag, errors.Join(err, br.Close())
}

func (g GenericPlans) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	QueueGeneric(b, sql, args...)
	br := g.DBTX.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		return nil, errors.Join(err, br.Close())
	}
	rows, err := br.Query()
	if err != nil {
		return nil, errors.Join(err, br.Close())
	}
	return &genericPlanRows{Rows: rows, br: br}, nil
}

func (g GenericPlans) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
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

// genericPlanRows are the query's rows. Once they are read (Err, which
// sqlc's methods call after the last row, or Close), the rest of the
// pipeline is read too, and its error is theirs.
type genericPlanRows struct {
	pgx.Rows
	br   pgx.BatchResults
	done bool
	err  error
}

func (r *genericPlanRows) finish() {
	if r.done {
		return
	}
	r.done = true
	r.Rows.Close()
	r.err = r.Rows.Err()
	if r.err == nil {
		_, r.err = r.br.Exec()
	}
	r.err = errors.Join(r.err, r.br.Close())
}

// Err is meant for after the last row: it reads the rest of the pipeline.
func (r *genericPlanRows) Err() error {
	r.finish()
	return r.err
}

func (r *genericPlanRows) Close() { r.finish() }

// GenericTx is a pgx.Tx whose Query, QueryRow and Exec run their statement
// with a generic plan, as GenericPlans's do, for statements that other libraries
// send through a pgx.Tx: River's JobCompleteTx, whose statement Postgres
// otherwise plans afresh on every call (a 0.46 ms plan for a 0.2 ms
// update of one job, measured with pg_stat_statements.track_planning).
// SendBatch, CopyFrom and the rest are the wrapped transaction's own.
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
