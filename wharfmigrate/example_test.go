package wharfmigrate_test

import (
	"context"
	"fmt"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/wharfmigrate"
)

// Pooled tells a pool through PgBouncer from a direct one: migrations need
// the direct one (ErrPooledConnection otherwise).
func ExamplePooled() {
	ctx := context.Background()
	pool, cleanup := testdb.ForExample() // a direct connection
	defer cleanup()

	pooled, err := wharfmigrate.Pooled(ctx, pool)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("through a pooler:", pooled)
	if err := wharfmigrate.Migrate(ctx, pool); err != nil {
		fmt.Println(err)
		return
	}
	status, err := wharfmigrate.Status(ctx, pool)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("up to date:", status.UpToDate())

	// Output:
	// through a pooler: false
	// up to date: true
}
