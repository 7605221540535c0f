// Command wharf is Wharf's operator CLI.
//
//	wharf migrate up|down|status   manage River's and Wharf's schema
//	wharf inbox list|show|replay|forget|rescue   inspect, replay, erase and rescue inbox messages
//	wharf outbox endpoints|deliveries|replay   operate the outbox
//	wharf partitions               list partitions, rows, sizes, oldest unfinished row
//	wharf prune [-dry-run]         run retention now (or show what it would do)
//	wharf send -url URL BODY       sign a webhook (Standard Webhooks, Stripe, GitHub) and POST it
//	wharf serve [-addr ADDR]       the dashboard, Prometheus metrics and a health check
//	wharf stats                    per source and day: received, duplicates, dead; per endpoint: attempts
//
// Every command reads the database URL from DATABASE_URL, or from
// -database-url; the outbox commands and serve read the outbox's key ring
// (outbox.Config.SecretKeys) from WHARF_SECRET_KEYS.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// command is one `wharf <name>` subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

var commands = map[string]command{
	"migrate":    {"migrate up|down|status: manage River's and Wharf's schema", runMigrate},
	"inbox":      {"inbox list|show|replay|forget|rescue: inspect, replay, erase and rescue inbox messages", runInbox},
	"outbox":     {"outbox endpoints list|add|disable|enable|rotate-secret|reencrypt, deliveries list|show, replay: operate the outbox", runOutbox},
	"partitions": {"partitions [-exact] [-json]: tables, partitions, rows, sizes, oldest unfinished row", runPartitions},
	"prune":      {"prune [-dry-run]: drop expired partitions and prune keys, as the periodic job does", runPrune},
	"stats":      {"stats [-days N] [-top N] [-json]: per source and day received, duplicates blocked, success; per endpoint attempts", runStats},
	"serve":      {"serve [-addr 127.0.0.1:8081] [-read-only]: the dashboard, /metrics and /healthz", runServe},
	"send":       {"send -url URL [-secret S] [-id ID] [-scheme standard|stripe|github] BODY: sign and POST a webhook", runSend},
}

// env is what commands share: output and a lazily opened pool.
type env struct {
	out, errOut io.Writer
	databaseURL string
	pool        *pgxpool.Pool
}

func (e *env) connect(ctx context.Context) (*pgxpool.Pool, error) {
	if e.pool != nil {
		return e.pool, nil
	}
	if e.databaseURL == "" {
		return nil, errors.New("no database: set DATABASE_URL or pass -database-url")
	}
	pool, err := pgxpool.New(ctx, e.databaseURL)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	e.pool = pool
	return pool, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runCLI(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// runCLI runs one command line and returns the exit code.
func runCLI(ctx context.Context, args []string, out, errOut io.Writer) int {
	global := flag.NewFlagSet("wharf", flag.ContinueOnError)
	global.SetOutput(errOut)
	// The flag's default is not $DATABASE_URL itself: usage would print
	// its password.
	databaseURL := global.String("database-url", "", "Postgres URL (default $DATABASE_URL)")
	global.Usage = func() { usage(errOut, global) }
	if err := global.Parse(args); err != nil {
		return 2
	}
	urlSet := false
	global.Visit(func(f *flag.Flag) { urlSet = urlSet || f.Name == "database-url" })
	if !urlSet {
		*databaseURL = os.Getenv("DATABASE_URL")
	}
	if global.NArg() == 0 {
		usage(errOut, global)
		return 2
	}
	name := global.Arg(0)
	if name == "help" {
		return help(errOut, global, global.Args()[1:])
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(errOut, "wharf: unknown command %q\n", name)
		usage(errOut, global)
		return 2
	}
	e := &env{out: out, errOut: errOut, databaseURL: *databaseURL}
	defer func() {
		if e.pool != nil {
			e.pool.Close()
		}
	}()
	if err := cmd.run(ctx, e, global.Args()[1:]); err != nil {
		var u usageError
		if errors.As(err, &u) {
			fmt.Fprintf(errOut, "wharf %s: %v\n", name, err)
			return 2
		}
		fmt.Fprintf(errOut, "wharf %s: %v\n", name, err)
		if notMigrated(err) {
			fmt.Fprintln(errOut, "wharf: the database has no Wharf tables yet: run `wharf migrate up` (with a direct connection, not through PgBouncer)")
		}
		return 1
	}
	return 0
}

// notMigrated reports whether err is Postgres saying that one of Wharf's
// or River's tables does not exist.
func notMigrated(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable &&
		(strings.Contains(pgErr.Message, `"wharf_`) || strings.Contains(pgErr.Message, `"river_`))
}

// help prints the usage of wharf, or of one command (its flags, through
// the command's own -h).
func help(w io.Writer, global *flag.FlagSet, args []string) int {
	if len(args) == 0 {
		usage(w, global)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(w, "wharf help: unknown command %q\n", args[0])
		usage(w, global)
		return 2
	}
	fmt.Fprintf(w, "wharf %s\n\n", cmd.summary)
	// The command prints its flags for -h (a command with subcommands,
	// for the subcommand named after it: wharf help inbox list).
	e := &env{out: w, errOut: w}
	_ = cmd.run(context.Background(), e, append(args[1:], "-h"))
	return 0
}

// usageError is a mistake in the command line (exit code 2).
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usage(w io.Writer, global *flag.FlagSet) {
	fmt.Fprintln(w, "usage: wharf [-database-url URL] <command> [arguments]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %s\n", commands[name].summary)
	}
	fmt.Fprintln(w, "\nflags:")
	global.PrintDefaults()
}
