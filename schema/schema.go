// Package schema holds Wharf's golang-migrate migrations, embedded so that
// wharf.Migrate can apply them without files on disk.
//
// Migrations are append-only: a landed file is never edited; a schema change
// is a new pair of NNNNNN_name.up.sql / NNNNNN_name.down.sql files.
package schema

import "embed"

// FS holds every migration file in this directory.
//
//go:embed *.sql
var FS embed.FS
