package main

import (
	"context"
	"fmt"

	"github.com/wharfhq/wharf"
)

func runMigrate(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usageError{"want up, down or status"}
	}
	switch args[0] {
	case "up", "status":
		fs := newFlagSet(e, "migrate "+args[0], "")
		if rest, err := parseInterleaved(fs, args[1:]); err != nil {
			return err
		} else if len(rest) > 0 {
			return usageError{fmt.Sprintf("unexpected argument %q", rest[0])}
		}
		if args[0] == "status" {
			return printStatus(ctx, e)
		}
		pool, err := e.connect(ctx)
		if err != nil {
			return err
		}
		if err := wharf.Migrate(ctx, pool); err != nil {
			return err
		}
		return printStatus(ctx, e)
	case "down":
		fs := newFlagSet(e, "migrate down", "-steps N | -all [-river]")
		steps := fs.Int("steps", 0, "how many Wharf migrations to revert")
		all := fs.Bool("all", false, "revert every Wharf migration: drops Wharf's tables and all their data")
		river := fs.Bool("river", false, "with -all, also remove River's tables (destroys every River job, the application's too)")
		if rest, err := parseInterleaved(fs, args[1:]); err != nil {
			return err
		} else if len(rest) > 0 {
			return usageError{fmt.Sprintf("unexpected argument %q", rest[0])}
		}
		switch {
		case *all == (*steps > 0):
			return usageError{"migrate down needs either -steps N or -all (which drops every Wharf table)"}
		case *steps < 0:
			return usageError{"-steps must be positive"}
		case *river && !*all:
			return usageError{"-river goes with -all"}
		}
		pool, err := e.connect(ctx)
		if err != nil {
			return err
		}
		if err := wharf.MigrateDown(ctx, pool, *steps); err != nil {
			return err
		}
		if *river {
			if err := wharf.MigrateRiverDown(ctx, pool); err != nil {
				return err
			}
		}
		return printStatus(ctx, e)
	default:
		return usageError{fmt.Sprintf("unknown migrate command %q: want up, down or status", args[0])}
	}
}

func printStatus(ctx context.Context, e *env) error {
	pool, err := e.connect(ctx)
	if err != nil {
		return err
	}
	s, err := wharf.Status(ctx, pool)
	if err != nil {
		return err
	}
	dirty := ""
	if s.WharfDirty {
		dirty = " (DIRTY: a migration failed half-way; see docs/operations.md, Migrations)"
	}
	fmt.Fprintf(e.out, "wharf schema: version %d of %d%s\n", s.WharfVersion, s.WharfLatest, dirty)
	fmt.Fprintf(e.out, "river schema: version %d of %d\n", s.RiverVersion, s.RiverLatest)
	if s.UpToDate() {
		fmt.Fprintln(e.out, "up to date")
	} else {
		fmt.Fprintln(e.out, "not up to date: run `wharf migrate up`")
	}
	return nil
}
