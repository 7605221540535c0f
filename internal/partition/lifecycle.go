package partition

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// DB is what the lifecycle functions run on: a pool, a connection or a
// transaction (DETACH … CONCURRENTLY needs a pool or a connection).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Info describes one partition of a parent table.
type Info struct {
	// Name is the partition's table name.
	Name string
	// Day is the UTC day it holds; zero when the name is not one of ours.
	Day time.Time
	// DetachPending is true when a DETACH … CONCURRENTLY was interrupted;
	// Finalize completes it.
	DetachPending bool
	// Rows is the planner's row estimate (pg_class.reltuples; -1 when the
	// table was never analyzed).
	Rows int64
	// Bytes is the partition's total size, indexes included.
	Bytes int64
}

// List returns parent's partitions, oldest day first.
func List(ctx context.Context, db DB, parent string) ([]Info, error) {
	rows, err := dbsqlc.New(db).CatalogPartitions(ctx, pgx.Identifier{parent}.Sanitize())
	if err != nil {
		return nil, err
	}
	out := make([]Info, len(rows))
	for i, row := range rows {
		out[i] = Info{Name: row.Name, DetachPending: row.DetachPending, Rows: row.EstimatedRows, Bytes: row.TotalBytes}
		out[i].Day, _ = ParseName(parent, row.Name)
	}
	return out, nil
}

// ListDetached returns the tables named like parent's partitions that are no
// longer attached to it: left behind when a drop was interrupted between
// its DETACH and its DROP.
func ListDetached(ctx context.Context, db DB, parent string) ([]Info, error) {
	names, err := dbsqlc.New(db).CatalogUnattachedTables(ctx, parent+`\_p%`)
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, name := range names {
		if day, ok := ParseName(parent, name); ok {
			out = append(out, Info{Name: name, Day: day})
		}
	}
	return out, nil
}

// Finalize completes an interrupted DETACH … CONCURRENTLY of name.
func Finalize(ctx context.Context, db DB, parent, name string) error {
	_, err := db.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s FINALIZE",
		pgx.Identifier{parent}.Sanitize(), pgx.Identifier{name}.Sanitize()))
	if err != nil {
		return fmt.Errorf("finalize detach of %s: %w", name, err)
	}
	return nil
}

// Detach detaches parent's partition name with DETACH … CONCURRENTLY, which
// takes only a SHARE UPDATE EXCLUSIVE lock on the parent: inserts and reads
// of other partitions go on meanwhile. It cannot run inside a transaction.
func Detach(ctx context.Context, db DB, parent, name string) error {
	_, err := db.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s CONCURRENTLY",
		pgx.Identifier{parent}.Sanitize(), pgx.Identifier{name}.Sanitize()))
	if err != nil {
		return fmt.Errorf("detach %s: %w", name, err)
	}
	return nil
}

// Drop drops a detached partition table.
func Drop(ctx context.Context, db DB, name string) error {
	if _, err := db.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("drop %s: %w", name, err)
	}
	return nil
}

// CountRows counts the rows of one partition exactly (a full scan of it).
func CountRows(ctx context.Context, db DB, name string) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{name}.Sanitize()).Scan(&n)
	return n, err
}
