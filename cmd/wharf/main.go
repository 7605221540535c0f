// Command wharf is Wharf's operator CLI.
//
//	wharf migrate up|down|status   manage River's and Wharf's schema
//	wharf inbox list|show|replay|forget|rescue   inspect, replay, erase and rescue inbox messages
//	wharf outbox endpoints|deliveries|replay|rescue   operate the outbox
//	wharf partitions               list partitions, rows, sizes, oldest unfinished row
//	wharf portal token|link -tenant T   mint a tenant portal token or magic link
//	wharf prune [-dry-run]         run retention now, by the application's recorded settings
//	wharf send -url URL BODY       sign a webhook (Standard Webhooks, Stripe, GitHub) and POST it
//	wharf serve [-addr ADDR]       the dashboard, Prometheus metrics and a health check
//	wharf stats                    per source and day: received, duplicates, dead; per endpoint: attempts
//
// Every command reads the database URL from DATABASE_URL, or from
// -database-url; the outbox commands and serve read the outbox's key ring
// (outbox.Config.SecretKeys) from WHARF_SECRET_KEYS. The portal commands
// need no database: they read the portal's token key from
// WHARF_PORTAL_KEY. Durations take Go's units or days: -since 7d,
// -inbox-retention 90d.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"os/user"
	"sort"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/audit"
	"github.com/wharfhq/wharf/wharfmigrate"
)

// command is one `wharf <name>` subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, env *env, args []string) error
	// schema is true when the command needs Wharf's tables: it refuses to
	// run on a database without them (wharfmigrate.Check).
	schema bool
	// subcommands is true when the command's first argument names one
	// (wharf inbox list): each subcommand has its own flags.
	subcommands bool
}

var commands = map[string]command{
	"migrate":    {"migrate up|down|status: manage River's and Wharf's schema", runMigrate, false, true},
	"inbox":      {"inbox list|show|replay|forget|rescue: inspect, replay, erase and rescue inbox messages", runInbox, true, true},
	"outbox":     {"outbox endpoints list|add|disable|enable|rotate-secret|reencrypt, deliveries list|show, replay, rescue: operate the outbox", runOutbox, true, true},
	"partitions": {"partitions [-exact] [-json]: tables, partitions, rows, sizes, oldest unfinished row, by the application's retention", runPartitions, true, false},
	"portal":     {"portal token|link -tenant T [-ttl D] [-read-only]: mint a tenant portal token or magic link, signed with $WHARF_PORTAL_KEY (no database)", runPortal, false, true},
	"prune":      {"prune [-dry-run] [-force]: drop expired partitions and prune keys by the application's retention, as the periodic job does", runPrune, true, false},
	"stats":      {"stats [-days N] [-top N] [-json]: per source and day received, duplicates blocked, success; per endpoint attempts", runStats, true, false},
	"serve":      {"serve [-addr 127.0.0.1:8081] [-read-only]: the dashboard, /metrics and /healthz", runServe, true, false},
	"send":       {"send -url URL [-secret S] [-id ID] [-scheme standard|stripe|github] BODY: sign and POST a webhook", runSend, false, false},
}

// env is what commands share: output and a lazily opened pool.
type env struct {
	out, errOut io.Writer
	databaseURL string
	// schema makes connect check that the database has Wharf's tables.
	schema bool
	pool   *pgxpool.Pool
}

// connect opens the pool, and for a command that needs Wharf's tables
// checks that the database has them.
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
	if e.schema {
		if err := wharfmigrate.Check(ctx, pool); err != nil {
			pool.Close()
			return nil, err
		}
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
	ctx = audit.WithActor(ctx, audit.Actor{Kind: audit.KindOperator, ID: cliOperator()})
	global := flag.NewFlagSet("wharf", flag.ContinueOnError)
	global.SetOutput(errOut)
	// The flag's default is not $DATABASE_URL itself: usage would print
	// its password.
	databaseURL := global.String("database-url", "", "Postgres URL (default $DATABASE_URL)")
	global.Usage = func() { usage(errOut, global) }
	if err := global.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
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
	name, rest := global.Arg(0), global.Args()[1:]
	if name == "help" {
		return help(errOut, global, rest)
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(errOut, "wharf: unknown command %q\n", name)
		usage(errOut, global)
		return 2
	}
	if cmd.subcommands && (len(rest) == 0 || isHelp(rest[0])) {
		code := help(errOut, global, []string{name})
		if len(rest) == 0 {
			code = 2
		}
		return code
	}
	e := &env{out: out, errOut: errOut, databaseURL: *databaseURL, schema: cmd.schema}
	defer func() {
		if e.pool != nil {
			e.pool.Close()
		}
	}()
	err := cmd.run(ctx, e, rest)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(errOut, "wharf %s: %s\n", name, describe(err))
		if errors.As(err, new(usageError)) {
			return 2
		}
		return 1
	}
	return 0
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
	if cmd.subcommands && len(args) == 1 {
		fmt.Fprintf(w, "usage: wharf %s\n\n`wharf help %s <command>` shows a command's flags.\n", cmd.summary, args[0])
		return 0
	}
	fmt.Fprintf(w, "wharf %s\n\n", cmd.summary)
	// The command prints its usage and flags for -h (a command with
	// subcommands, the subcommand's: wharf help inbox list).
	e := &env{out: w, errOut: w}
	_ = cmd.run(context.Background(), e, append(args[1:], "-h"))
	return 0
}

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

// cliOperator names the CLI's user in the audit log: $WHARF_OPERATOR, or
// "cli:" and the login name.
func cliOperator() string {
	if name := os.Getenv("WHARF_OPERATOR"); name != "" {
		return name
	}
	if u, err := user.Current(); err == nil {
		return "cli:" + u.Username
	}
	return "cli"
}
