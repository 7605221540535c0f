package main

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/schema"
)

// riverTable stands for River's schema, which Wharf's jobs need beside its
// own tables.
const riverTable = "river_job"

var tableStatements = regexp.MustCompile(`(?i)\b(CREATE|DROP)\s+TABLE\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?(wharf_\w+)`)

// schemaTables lists the tables this build's migrations leave behind, in
// migration order: what a database migrated to this build's version has.
var schemaTables = sync.OnceValue(func() []string {
	files, _ := fs.Glob(schema.FS, "*.up.sql") // sorted: migration order
	var tables []string
	for _, name := range files {
		sql, _ := fs.ReadFile(schema.FS, name)
		for _, m := range tableStatements.FindAllStringSubmatch(string(sql), -1) {
			table := strings.ToLower(m[2])
			if tables = slices.DeleteFunc(tables, func(t string) bool { return t == table }); strings.EqualFold(m[1], "CREATE") {
				tables = append(tables, table)
			}
		}
	}
	return tables
})

// notMigratedError says that the database lacks tables this wharf needs.
type notMigratedError struct {
	missing []string
	none    bool // none of Wharf's tables is there
}

func (n notMigratedError) Error() string {
	const how = "run `wharf migrate up` (with a direct connection, not through PgBouncer)"
	if n.none {
		return "the database has no Wharf tables: " + how
	}
	return fmt.Sprintf("the database's schema is older than this wharf's (no table %s): %s", strings.Join(n.missing, ", "), how)
}

// checkSchema returns a notMigratedError when the database lacks one of the
// tables this build's migrations create, or River's. It reads the catalog
// only, so it works through PgBouncer.
func checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	q := dbsqlc.New(pool)
	wharfTables := schemaTables()
	var missing []string
	for _, table := range append(slices.Clone(wharfTables), riverTable) {
		ok, err := q.CatalogRelationExists(ctx, pgx.Identifier{table}.Sanitize())
		if err != nil {
			return err
		}
		if !ok {
			missing = append(missing, table)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	none := !slices.ContainsFunc(wharfTables, func(t string) bool { return !slices.Contains(missing, t) })
	return notMigratedError{missing: missing, none: none}
}
