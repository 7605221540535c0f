package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/jobs"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/signature"
)

// -h and -help print the usage and exit 0, for wharf and each command.
func TestHelpFlagExitsZero(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-h"}, {"-help"}, {"inbox", "-h"}, {"inbox", "list", "-h"}, {"prune", "-help"}, {"partitions", "-h"},
		{"outbox", "deliveries", "list", "-h"}, {"send", "-h"}, {"serve", "-h"}, {"migrate", "down", "-h"}, {"stats", "-h"},
	} {
		code, out, errOut := cli(t, append([]string{"-database-url", ""}, args...)...)
		require.Equal(t, 0, code, "%v: %s", args, errOut)
		require.Contains(t, out+errOut, "usage", args)
		require.NotContains(t, errOut, "help requested", args)
	}
}

// unmigratedURL returns the URL of a database without Wharf's tables.
func unmigratedURL(t *testing.T) string {
	t.Helper()
	url := testdb.NewURL(t)
	code, _, errOut := cli(t, "-database-url", url, "migrate", "down", "-all")
	require.Equal(t, 0, code, errOut)
	return url
}

// On a database without Wharf's tables, every command that needs them says
// to migrate and exits 1; wharf serve refuses to start.
func TestCommandsRefuseAnUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	url := unmigratedURL(t)
	for _, args := range [][]string{
		{"partitions"}, {"prune", "-dry-run"}, {"stats"}, {"inbox", "list"}, {"outbox", "endpoints", "list"},
		{"outbox", "deliveries", "list"}, {"serve", "-addr", "127.0.0.1:0"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var out, errOut bytes.Buffer
		code := runCLI(ctx, append([]string{"-database-url", url}, args...), &out, &errOut)
		cancel()
		require.Equal(t, 1, code, "%v: %s%s", args, out.String(), errOut.String())
		require.Contains(t, errOut.String(), "run `wharf migrate up`", args)
		require.Equal(t, 1, strings.Count(errOut.String(), "\n"), "%v: one line: %s", args, errOut.String())
		require.Empty(t, out.String(), args)
	}
}

// recordRetention records cfg as the application's retention in url's
// database, as its periodic jobs do.
func recordRetention(t *testing.T, pool *pgxpool.Pool, cfg *jobs.Config) {
	t.Helper()
	m, err := jobs.NewMaintainer(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, m.RecordRetention(context.Background()))
}

// wharf prune and wharf partitions go by the application's recorded
// retention: without a record prune refuses until every setting is given;
// a flag keeping less than the application needs -force; durations take
// days.
func TestPruneByTheApplicationsRetention(t *testing.T) {
	t.Parallel()
	url := testdb.NewURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	code, _, errOut := cli(t, "-database-url", url, "prune")
	require.Equal(t, 2, code, "no record: the CLI does not guess")
	require.Contains(t, errOut, "no retention settings are recorded")
	require.Contains(t, errOut, "-inbox-retention")
	code, out, errOut := cli(t, "-database-url", url, "prune", "-dry-run", "-dedupe-window", "72h", "-inbox-retention", "60d",
		"-outbox-retention", "60d", "-attempt-retention", "90d", "-dead-letter-retention", "30d", "-erased-key-retention", "90d", "-audit-retention", "365d")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "inbox-retention 60d")
	code, out, _ = cli(t, "-database-url", url, "partitions")
	require.Equal(t, 0, code)
	require.Contains(t, out, "wharf_inbox_messages (retention not recorded,")
	require.NotContains(t, out, "expired")

	recordRetention(t, pool, &jobs.Config{InboxRetention: 60 * 24 * time.Hour})
	code, out, errOut = cli(t, "-database-url", url, "partitions")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "wharf_inbox_messages (retention 60d,")
	require.Contains(t, out, "wharf_outbox_attempts (retention 90d,")
	require.Regexp(t, `\d+(\.\d)? (B|KiB|MiB)\s`, out, "sizes in binary units")

	code, out, errOut = cli(t, "-database-url", url, "prune", "-dry-run")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "retention (the application's, recorded ")
	require.Contains(t, out, "dedupe-window 3d, inbox-retention 60d, outbox-retention 30d")
	require.Contains(t, out, "would drop 0 partitions")

	code, _, errOut = cli(t, "-database-url", url, "prune", "-inbox-retention", "30d")
	require.Equal(t, 2, code, "30 days keeps less than the application's 60")
	require.Contains(t, errOut, "-inbox-retention 30d (the application's: 60d)")
	require.Contains(t, errOut, "-force")
	code, _, errOut = cli(t, "-database-url", url, "prune", "-scrub-after", "2d")
	require.Equal(t, 2, code, "the application never scrubs")
	require.Contains(t, errOut, "-scrub-after 48h (the application's: never)")
	code, out, errOut = cli(t, "-database-url", url, "prune", "-inbox-retention", "90d")
	require.Equal(t, 0, code, "keeping more needs no -force: %s", errOut)
	require.Contains(t, out, "dropped 0 partitions")
	code, out, errOut = cli(t, "-database-url", url, "prune", "-inbox-retention", "30d", "-force")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "inbox-retention 30d")

	// The library's field names and durations come back as the flags'.
	code, _, errOut = cli(t, "-database-url", url, "prune", "-dedupe-window", "1h", "-force")
	require.Equal(t, 2, code)
	require.Equal(t, "wharf prune: invalid config: -dedupe-window 1h is outside [3d, 90d]\n", errOut)
}

// A next-page hint repeats the listing's filters: the next page of a
// filtered listing holds only what the filter keeps.
func TestNextPageKeepsTheFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.NewURL(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ib, err := inbox.New(pool, &inbox.Config{Sources: []inbox.Source{{Name: "s", Verifier: signature.VerifierFunc(nil)}}})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var batch []inbox.Incoming
		for _, id := range []string{"evt_d1", "evt_p1", "evt_d2", "evt_p2", "evt_d3"} {
			batch = append(batch, inbox.Incoming{Source: "s", EventID: id, Body: []byte(`{}`)})
		}
		_, err := ib.ReceiveManyTx(ctx, tx, batch)
		return err
	}))
	_, err = pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = CASE WHEN event_id LIKE 'evt_d%' THEN 'dead' ELSE 'processed' END")
	require.NoError(t, err)

	var seen []string
	args := []string{"inbox", "list", "-status", "dead", "-limit", "2"}
	for range 5 {
		code, out, errOut := cli(t, append([]string{"-database-url", url}, args...)...)
		require.Equal(t, 0, code, errOut)
		require.NotContains(t, out, "evt_p", "a processed message on a page of dead ones")
		seen = append(seen, strings.Fields(out)...)
		hint, ok := strings.CutPrefix(strings.TrimSpace(errOut), "more: wharf ")
		if !ok {
			break
		}
		args = strings.Fields(hint)
	}
	for _, id := range []string{"evt_d1", "evt_d2", "evt_d3"} {
		require.Contains(t, seen, id)
	}

	// The outbox's listings too.
	ob, err := outbox.New(pool, nil)
	require.NoError(t, err)
	for _, tenant := range []string{"acme", "acme", "globex"} {
		_, err := ob.EndpointCreate(ctx, &outbox.EndpointParams{URL: "https://" + tenant + ".example/h", Tenant: tenant})
		require.NoError(t, err)
	}
	code, _, errOut := cli(t, "-database-url", url, "outbox", "endpoints", "list", "-tenant", "acme", "-limit", "1")
	require.Equal(t, 0, code)
	require.Contains(t, errOut, "more: wharf outbox endpoints list ")
	require.Contains(t, errOut, " -tenant acme ")
	require.Contains(t, errOut, " -limit 1 ")
	code, _, errOut = cli(t, "-database-url", url, "outbox", "deliveries", "list", "-status", "dead", "-limit", "1")
	require.Equal(t, 0, code)
	require.Empty(t, errOut, "no dead delivery: no next page")
}

// wharf send -scheme stripe without -id keeps the body's own id: a
// captured event sent twice is a duplicate.
func TestSendStripeKeepsTheBodysID(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	pool := testdb.New(t)
	ib, err := inbox.New(pool, &inbox.Config{Sources: []inbox.Source{
		{Name: "stripe", Verifier: signature.NewStripe(signature.Secrets{secret}, nil)},
	}})
	require.NoError(t, err)
	srv := httptest.NewServer(ib.Handler())
	t.Cleanup(srv.Close)
	body := `{"id":"evt_captured_1","type":"charge.succeeded","data":{"amount":12345678901234567890}}`
	args := []string{"send", "-url", srv.URL + "/stripe", "-secret", secret, "-scheme", "stripe", body}
	code, out, errOut := cli(t, args...)
	require.Equal(t, 0, code, out+errOut)
	require.Contains(t, out, "event id: evt_captured_1")
	require.Contains(t, out, `"status":"accepted"`)
	code, out, errOut = cli(t, args...)
	require.Equal(t, 0, code, out+errOut)
	require.Contains(t, out, `"status":"duplicate"`, "the same captured event sent twice")
	var stored []byte
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT body FROM wharf_inbox_messages").Scan(&stored))
	require.JSONEq(t, body, string(stored), "the body is sent as it is")
	require.Contains(t, string(stored), "12345678901234567890")
}

// Durations take days wherever the CLI reads one.
func TestDurationFlagsTakeDays(t *testing.T) {
	t.Parallel()
	url := testdb.NewURL(t)
	code, out, errOut := cli(t, "-database-url", url, "inbox", "replay", "-status", "dead", "-since", "7d")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "replayed 0 dead message(s)")
	code, _, errOut = cli(t, "-database-url", url, "outbox", "replay", "-dead", "-endpoint", "00000000-0000-0000-0000-000000000001", "-since", "1d12h")
	require.Equal(t, 1, code, "no such endpoint, but the duration parsed")
	require.NotContains(t, errOut, "invalid value")
	code, _, errOut = cli(t, "-database-url", url, "inbox", "replay", "-status", "dead", "-since", "7 days")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "days (7d, 1d12h)")
}

// Errors are printed once, with wharf's prefix only, naming the CLI's flags
// rather than the library's fields.
func TestErrorsNameFlagsOnce(t *testing.T) {
	t.Parallel()
	url := testdb.NewURL(t)
	code, _, errOut := cli(t, "-database-url", url, "outbox", "endpoints", "add", "-url", "http://127.0.0.1:1/h")
	require.Equal(t, 2, code)
	require.Equal(t, "wharf outbox: -url resolves to 127.0.0.1 (loopback): pass -allow-private to allow private and loopback addresses (a development setup)\n", errOut)
	code, _, errOut = cli(t, "-database-url", url, "outbox", "endpoints", "add", "-url", "https://a.example/h", "-max-in-flight", "5000")
	require.Equal(t, 2, code)
	require.Equal(t, "wharf outbox: invalid endpoint: -max-in-flight must be 1 to 1000, or -1 for no cap\n", errOut)
	require.Equal(t, "invalid endpoint: refused to connect", describe(errString("outbox: invalid endpoint: outbox: refused to connect")))
	require.Equal(t, "invalid config: -dedupe-window 1h is outside [3d, 90d]; -inbox-retention 1h is outside [3d, 90d]",
		describe(errString("jobs: invalid config: DedupeWindow 1h0m0s is outside [72h0m0s, 2160h0m0s]\nInboxRetention 1h0m0s is outside [72h0m0s, 2160h0m0s]")))
}

type errString string

func (e errString) Error() string { return string(e) }

// A bulk replay shows its counts, not one log line per message: the
// library's per-message lines stay out of the CLI's output and the default
// logger's. Not parallel: it replaces the default logger.
func TestBulkReplayPrintsNoLinePerMessage(t *testing.T) {
	ctx := context.Background()
	var logged bytes.Buffer
	previous := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	t.Cleanup(func() { slog.SetDefault(previous) })

	url := testdb.NewURL(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ib, err := inbox.New(pool, &inbox.Config{Sources: []inbox.Source{{Name: "s", Verifier: signature.VerifierFunc(nil)}}})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var batch []inbox.Incoming
		for _, id := range []string{"evt_1", "evt_2", "evt_3"} {
			batch = append(batch, inbox.Incoming{Source: "s", EventID: id, Body: []byte(`{}`)})
		}
		_, err := ib.ReceiveManyTx(ctx, tx, batch)
		return err
	}))
	_, err = pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = 'dead'")
	require.NoError(t, err)

	code, out, errOut := cli(t, "-database-url", url, "inbox", "replay", "-status", "dead")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "replayed 3 dead message(s); skipped 0 no longer replayable\n", out)
	require.Empty(t, errOut, "not a terminal: the summary is the one line")
	require.NotContains(t, logged.String(), "replayed", "the library logged each message")

	code, out, errOut = cli(t, "-database-url", url, "inbox", "forget", "s", "evt_1")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "erased the body and headers of 1 message(s)")
	require.Empty(t, errOut)
	require.Empty(t, logged.String())
}
