package idempotency_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf"
	"github.com/wharfhq/wharf/internal/testdb"
)

// exampleDatabase creates a database migrated with wharf.Migrate on the test
// server and returns a pool on it and a function that drops it. Examples have
// no *testing.T for testdb.New; a failure here panics, failing the example.
func exampleDatabase() (*pgxpool.Pool, func()) {
	ctx := context.Background()
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	admin, err := pgx.Connect(ctx, testdb.URL())
	must(err)
	suffix := make([]byte, 8)
	_, _ = rand.Read(suffix)
	name := "wharf_example_" + hex.EncodeToString(suffix)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	must(err)

	conf, err := pgxpool.ParseConfig(testdb.URL())
	must(err)
	conf.ConnConfig.Database = name
	pool, err := pgxpool.NewWithConfig(ctx, conf)
	must(err)
	must(wharf.Migrate(ctx, pool))
	return pool, func() {
		pool.Close()
		_, err := admin.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		must(err)
		must(admin.Close(ctx))
	}
}
