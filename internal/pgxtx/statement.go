package pgxtx

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// DBTX is what sqlc's queries run on: a pool, a connection or a
// transaction.
type DBTX = dbsqlc.DBTX

// Statement is one SQL statement with its arguments, as a generated query
// method sends it: for a pipeline of one's own, in which it goes with
// statements of other origins (a savepoint and a processed mark, say).
type Statement struct {
	SQL  string
	Args []any
}

// Capture returns the statement that call, a generated :exec query method
// run on the DBTX it is given, sends, without sending it: the SQL stays in
// queries/, and only the caller decides how it travels.
func Capture(call func(db DBTX) error) Statement {
	var r recorder
	_ = call(&r) // the recorder fails nothing an :exec method checks
	return r.statement
}

// errCaptureOnly is what a recorder answers to a call that wants rows.
var errCaptureOnly = errors.New("pgxtx: Capture records an :exec statement; it has no rows to give")

// recorder is a DBTX that keeps the statement it is given instead of
// sending it.
type recorder struct{ statement Statement }

func (r *recorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.statement = Statement{SQL: sql, Args: args}
	return pgconn.CommandTag{}, nil
}

func (r *recorder) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errCaptureOnly
}

func (r *recorder) QueryRow(context.Context, string, ...any) pgx.Row {
	return failedRow{errCaptureOnly}
}

func (r *recorder) SendBatch(context.Context, *pgx.Batch) pgx.BatchResults {
	panic(errCaptureOnly.Error())
}

// failedRow is a row whose Scan returns err.
type failedRow struct{ err error }

func (r failedRow) Scan(...any) error { return r.err }

// The statements around a statement with a generic plan (see
// GenericPlans), captured from queries/catalog.sql once.
var (
	planCacheModeGeneric = Capture(func(db DBTX) error {
		return dbsqlc.New(db).PlanCacheModeGeneric(context.Background())
	}).SQL
	planCacheModeRestore = Capture(func(db DBTX) error {
		return dbsqlc.New(db).PlanCacheModeRestore(context.Background())
	}).SQL
)
