package wharf_test

import (
	"context"
	"fmt"

	"github.com/wharfhq/wharf"
	"github.com/wharfhq/wharf/internal/testdb"
)

// Migrate at startup, from every process if need be: it is a no-op when the
// schema is up to date and serialises concurrent runs. Status says where
// both schemas stand.
func ExampleMigrate() {
	ctx := context.Background()
	pool, cleanup := testdb.ForExample() // already migrated once, as after a first deploy
	defer cleanup()

	if err := wharf.Migrate(ctx, pool); err != nil {
		fmt.Println(err) // errors.Is(err, wharf.ErrDirty): repair by hand (README, "Operations")
		return
	}
	status, err := wharf.Status(ctx, pool)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("up to date:", status.UpToDate())
	fmt.Println("wharf at latest:", status.WharfVersion == status.WharfLatest, "dirty:", status.WharfDirty)
	fmt.Println("river at latest:", status.RiverVersion == status.RiverLatest)

	// Output:
	// up to date: true
	// wharf at latest: true dirty: false
	// river at latest: true
}
