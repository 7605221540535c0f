package partition

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

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
func List(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, parent string) ([]Info, error) {
	rows, err := db.Query(ctx, `
		SELECT c.relname, i.inhdetachpending, c.reltuples::bigint, pg_total_relation_size(c.oid)
		FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = to_regclass($1)
		ORDER BY c.relname`, pgx.Identifier{parent}.Sanitize())
	if err != nil {
		return nil, err
	}
	infos, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Info, error) {
		var info Info
		err := row.Scan(&info.Name, &info.DetachPending, &info.Rows, &info.Bytes)
		info.Day, _ = ParseName(parent, info.Name)
		return info, err
	})
	return infos, err
}

// Finalize completes an interrupted DETACH … CONCURRENTLY of name.
func Finalize(ctx context.Context, pool *pgxpool.Pool, parent, name string) error {
	_, err := pool.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s FINALIZE",
		pgx.Identifier{parent}.Sanitize(), pgx.Identifier{name}.Sanitize()))
	if err != nil {
		return fmt.Errorf("finalize detach of %s: %w", name, err)
	}
	return nil
}

// Detach detaches parent's partition name with DETACH … CONCURRENTLY, which
// takes only a SHARE UPDATE EXCLUSIVE lock on the parent: inserts and reads
// of other partitions go on meanwhile. It cannot run inside a transaction.
func Detach(ctx context.Context, pool *pgxpool.Pool, parent, name string) error {
	_, err := pool.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s CONCURRENTLY",
		pgx.Identifier{parent}.Sanitize(), pgx.Identifier{name}.Sanitize()))
	if err != nil {
		return fmt.Errorf("detach %s: %w", name, err)
	}
	return nil
}

// Drop drops a detached partition table.
func Drop(ctx context.Context, pool *pgxpool.Pool, name string) error {
	if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("drop %s: %w", name, err)
	}
	return nil
}

// CountRows counts the rows of one partition exactly (a full scan of it).
func CountRows(ctx context.Context, pool *pgxpool.Pool, name string) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{name}.Sanitize()).Scan(&n)
	return n, err
}
