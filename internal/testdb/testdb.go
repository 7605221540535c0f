// Package testdb gives each test its own migrated Postgres database.
//
// A template database is migrated once (River's and Wharf's migrations, via
// wharfmigrate.Migrate) and cloned per test by pgtestdb in milliseconds. A test's
// database is dropped when it passes and kept, with its URL logged, when it
// fails. There is no fallback: without a reachable server the test fails and
// says how to start one.
package testdb

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	neturl "net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver pgtestdb uses
	"github.com/peterldowns/pgtestdb"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/wharfhq/wharf/schema"
	"github.com/wharfhq/wharf/wharfmigrate"
)

// DefaultURL is the server tests use when neither WHARF_TEST_DATABASE_URL nor
// DATABASE_URL is set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// URL returns the URL of the server tests run against.
func URL() string {
	for _, name := range []string{"WHARF_TEST_DATABASE_URL", "DATABASE_URL"} {
		if v := os.Getenv(name); v != "" {
			return v
		}
	}
	return DefaultURL
}

var (
	reachOnce sync.Once
	reachErr  error
)

// New returns a pool on a fresh database migrated to the latest version. The
// pool is closed and the database dropped when the test ends.
func New(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	conf := config(tb)
	instance := pgtestdb.Custom(tb, conf, migrator{})
	pool, err := pgxpool.New(context.Background(), instance.URL())
	if err != nil {
		tb.Fatalf("testdb: open pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// NewWithMaxConns is New with a pool of at most maxConns connections.
func NewWithMaxConns(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(NewURL(tb))
	if err != nil {
		tb.Fatalf("testdb: parse URL: %v", err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("testdb: open pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// NewURL returns the URL of a fresh migrated database, for tests that need
// to open their own connections (a subprocess, say).
func NewURL(tb testing.TB) string {
	tb.Helper()
	return pgtestdb.Custom(tb, config(tb), migrator{}).URL()
}

func config(tb fataler) pgtestdb.Config {
	tb.Helper()
	url := URL()
	reachOnce.Do(func() { reachErr = ping(url) })
	requireReachable(tb, url, reachErr)
	pc, err := pgx.ParseConfig(url)
	if err != nil {
		tb.Fatalf("testdb: parse %s: %v", redact(url), err)
	}
	options := "sslmode=disable"
	if u, err := neturl.Parse(url); err == nil && u.RawQuery != "" {
		options = u.RawQuery // the server's own options (sslmode…) carry over
	}
	return pgtestdb.Config{
		DriverName: "pgx",
		Host:       pc.Host,
		Port:       fmt.Sprint(pc.Port),
		User:       pc.User,
		Password:   pc.Password,
		Database:   pc.Database,
		Options:    options,
	}
}

// fataler is the part of testing.TB that requireReachable needs.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// requireReachable fails the test, saying how to start a server, when the
// server at url could not be reached. Tests never skip for want of one.
func requireReachable(tb fataler, url string, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatalf("testdb: cannot reach Postgres at %s: %v\n"+
			"Start one with `make db` (or `pg_ctlcluster --skip-systemctl-redirect 15 main start`),\n"+
			"or point WHARF_TEST_DATABASE_URL at a server where this user may create databases and roles.",
			redact(url), err)
	}
}

func ping(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

func redact(url string) string {
	pc, err := pgx.ParseConfig(url)
	if err != nil {
		return "(unparseable URL)"
	}
	return fmt.Sprintf("%s@%s:%d/%s", pc.User, pc.Host, pc.Port, pc.Database)
}

// migrator runs wharfmigrate.Migrate on the template database.
type migrator struct{}

// Hash covers Wharf's migration files, River's migrations and the current
// UTC day: the template carries partitions around the day it was built, so
// a template from yesterday is rebuilt rather than reused.
func (migrator) Hash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(schema.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(schema.FS, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%s\x00", path, data)
		return nil
	})
	if err != nil {
		return "", err
	}
	river, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	if err != nil {
		return "", err
	}
	for _, m := range river.AllVersions() {
		fmt.Fprintf(h, "river%d\x00%s\x00", m.Version, m.SQLUp)
	}
	fmt.Fprintf(h, "day%s", time.Now().UTC().Format("20060102"))
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

func (migrator) Migrate(ctx context.Context, _ *sql.DB, conf pgtestdb.Config) error {
	pool, err := pgxpool.New(ctx, conf.URL())
	if err != nil {
		return err
	}
	defer pool.Close()
	return wharfmigrate.Migrate(ctx, pool)
}
