package inbox

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// genericPlans is a dbsqlc.DBTX whose Query and Exec run their statement
// with a generic plan, in the same round trip: they send, as one pipeline,
// PlanCacheModeGeneric (SET LOCAL plan_cache_mode = force_generic_plan,
// keeping the mode it had), the statement, and PlanCacheModeRestore.
// QueryRow and SendBatch are tx's own.
//
// Why: Postgres plans a prepared statement afresh on every execution when a
// custom plan looks cheaper than the generic one, as it does for statements
// on the day-partitioned messages (it prunes partitions by the parameters,
// and knows the arrays' lengths). Planning the ordering lookups, a lookup
// per message over every day partition, cost milliseconds per batch, more
// than the rest of it; planning a message's processed mark cost more than
// running it. Their generic plans prune partitions at run time.
type genericPlans struct{ pgx.Tx }

var _ dbsqlc.DBTX = genericPlans{}

// queueGeneric queues sql, with a generic plan, on b (see genericPlans).
func queueGeneric(b *pgx.Batch, sql string, args ...any) {
	b.Queue(dbsqlc.PlanCacheModeGenericSQL)
	b.Queue(sql, args...)
	b.Queue(dbsqlc.PlanCacheModeRestoreSQL)
}

func (g genericPlans) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	b := &pgx.Batch{}
	queueGeneric(b, sql, args...)
	br := g.Tx.SendBatch(ctx, b)
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

func (g genericPlans) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	queueGeneric(b, sql, args...)
	br := g.Tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		return nil, errors.Join(err, br.Close())
	}
	rows, err := br.Query()
	if err != nil {
		return nil, errors.Join(err, br.Close())
	}
	return &genericPlanRows{Rows: rows, br: br}, nil
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
