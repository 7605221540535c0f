package inbox

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// genericPlans is a dbsqlc.DBTX whose Query runs its statement with a
// generic plan, in the same round trip: it sends, as one pipeline, a
// savepoint, SET LOCAL plan_cache_mode = force_generic_plan, the query,
// and a rollback to the savepoint and its release, which restore the mode.
// For read-only queries only: the rollback would undo a write, and release
// a lock the query took. Exec, QueryRow and SendBatch are tx's own.
//
// Why: Postgres plans a prepared statement afresh on every execution when a
// custom plan looks cheaper than the generic one, as it does for the
// ordering lookups (it knows the arrays' lengths, and prunes partitions by
// the parameters), and planning a lookup per message over every day
// partition costs milliseconds: several times their execution, and more
// than the rest of a batch. Their generic plans prune partitions at run
// time.
type genericPlans struct{ pgx.Tx }

const (
	genericPlanSavepointSQL = "SAVEPOINT wharf_generic_plan"
	genericPlanRollbackSQL  = "ROLLBACK TO SAVEPOINT wharf_generic_plan"
	genericPlanReleaseSQL   = "RELEASE SAVEPOINT wharf_generic_plan"
)

var _ dbsqlc.DBTX = genericPlans{}

func (g genericPlans) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	b.Queue(genericPlanSavepointSQL)
	b.Queue(dbsqlc.SetLocalPlanCacheModeSQL, "force_generic_plan")
	b.Queue(sql, args...)
	b.Queue(genericPlanRollbackSQL)
	b.Queue(genericPlanReleaseSQL)
	br := g.Tx.SendBatch(ctx, b)
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return nil, errors.Join(err, br.Close())
		}
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
	for range 2 {
		if r.err != nil {
			break
		}
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
