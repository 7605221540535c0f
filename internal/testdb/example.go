package testdb

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterldowns/pgtestdb"
)

// ForExample returns a pool on a fresh database migrated to the latest
// version, cloned from the same template as New's, and a function that
// closes the pool and drops the database. It is for runnable examples, which
// have no testing.TB: call the function before the example returns (defer
// it), after stopping whatever uses the pool. A failure panics, which fails
// the example; nothing is printed, so an example's output is its own.
func ForExample() (*pgxpool.Pool, func()) {
	tb := &exampleTB{}
	instance := pgtestdb.Custom(tb, config(tb), migrator{})
	pool, err := pgxpool.New(context.Background(), instance.URL())
	if err != nil {
		tb.Fatalf("testdb: open pool: %v", err)
	}
	return pool, func() {
		pool.Close()
		tb.cleanup()
	}
}

// exampleTB is the part of testing.TB that pgtestdb needs, for examples: a
// failure panics, logs are dropped (an example's output is compared), and
// cleanups run, last registered first, when the example's cleanup runs.
type exampleTB struct {
	cleanups []func()
}

func (*exampleTB) Helper()              {}
func (*exampleTB) Failed() bool         { return false }
func (*exampleTB) Logf(string, ...any)  {}
func (tb *exampleTB) Cleanup(fn func()) { tb.cleanups = append(tb.cleanups, fn) }
func (*exampleTB) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

func (tb *exampleTB) cleanup() {
	for _, fn := range slices.Backward(tb.cleanups) {
		fn()
	}
}
