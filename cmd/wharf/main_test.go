package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/signature"
)

func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = runCLI(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestMigrateCommands(t *testing.T) {
	t.Parallel()
	url := testdb.NewURL(t)

	code, out, _ := cli(t, "-database-url", url, "migrate", "status")
	require.Equal(t, 0, code)
	require.Contains(t, out, "up to date")

	code, _, errOut := cli(t, "-database-url", url, "migrate", "down")
	require.Equal(t, 2, code, "down without -steps or -all is refused")
	require.Contains(t, errOut, "-steps N or -all")

	code, out, _ = cli(t, "-database-url", url, "migrate", "down", "-all")
	require.Equal(t, 0, code)
	require.Contains(t, out, "wharf schema: version 0 of")
	require.Contains(t, out, "not up to date")

	// Unmigrated, a command says so and how to migrate.
	code, _, errOut = cli(t, "-database-url", url, "inbox", "list")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "run `wharf migrate up`")
	// Migrated but for the newest migration: older than this wharf.
	code, _, errOut = cli(t, "-database-url", url, "migrate", "up")
	require.Equal(t, 0, code, errOut)
	code, _, errOut = cli(t, "-database-url", url, "migrate", "down", "-steps", "1")
	require.Equal(t, 0, code, errOut)
	code, _, errOut = cli(t, "-database-url", url, "inbox", "list")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "its Wharf schema is older (version")
	require.Contains(t, errOut, "run `wharf migrate up`")

	code, out, _ = cli(t, "-database-url", url, "migrate", "up")
	require.Equal(t, 0, code)
	require.Contains(t, out, "up to date")

	code, _, errOut = cli(t, "-database-url", url, "migrate", "sideways")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown migrate command "sideways"`)
}

// wharf help prints the commands, or one command's summary and flags,
// without a database.
func TestHelp(t *testing.T) {
	t.Parallel()
	code, _, errOut := cli(t, "help")
	require.Equal(t, 0, code)
	for name := range commands {
		require.Contains(t, errOut, "  "+name, "help lists %s", name)
	}
	code, _, errOut = cli(t, "help", "inbox", "list")
	require.Equal(t, 0, code)
	require.Contains(t, errOut, "-after")
	require.Contains(t, errOut, "-status")
	code, _, errOut = cli(t, "help", "prune")
	require.Equal(t, 0, code)
	require.Contains(t, errOut, "-dry-run")
	code, _, errOut = cli(t, "help", "nosuch")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown command "nosuch"`)
}

func TestNoDatabase(t *testing.T) {
	t.Parallel()
	code, _, errOut := cli(t, "-database-url", "", "migrate", "status")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "set DATABASE_URL")
}

func TestInboxCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.NewURL(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	ib, err := inbox.New(pool, &inbox.Config{Sources: []inbox.Source{{Name: "s", Verifier: signature.VerifierFunc(nil)}}})
	require.NoError(t, err)
	var res *inbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err = ib.ReceiveTx(ctx, tx, inbox.Incoming{Source: "s", EventID: "evt_cli", EventType: "t", Body: []byte(`{"k":"v"}`)})
		return err
	}))

	code, out, _ := cli(t, "-database-url", url, "inbox", "list")
	require.Equal(t, 0, code)
	require.Contains(t, out, res.MessageID.String())
	require.Contains(t, out, "evt_cli")
	code, out, _ = cli(t, "-database-url", url, "inbox", "list", "-json")
	require.Equal(t, 0, code)
	var row map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &row))
	require.Equal(t, "evt_cli", row["event_id"])
	require.Equal(t, "received", row["status"])
	require.NotContains(t, out, `"k":"v"`, "no body in a listing")

	code, out, _ = cli(t, "-database-url", url, "inbox", "show", res.MessageID.String())
	require.Equal(t, 0, code)
	require.Contains(t, out, `{"k":"v"}`)
	require.NotContains(t, out, "late arrival")

	// A late arrival: the key pruned, the same event received again.
	_, err = pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = 'processed', processed_at = now()")
	require.NoError(t, err)
	_, err = dbsqlc.New(pool).RetentionInboxKeysDelete(ctx, dbsqlc.RetentionInboxKeysDeleteParams{
		Cutoff: time.Now().Add(time.Hour), ErasedCutoff: time.Now().Add(-time.Hour), BatchSize: 10,
	})
	require.NoError(t, err)
	var late *inbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		late, err = ib.ReceiveTx(ctx, tx, inbox.Incoming{Source: "s", EventID: "evt_cli", EventType: "t", Body: []byte(`{"k":"v"}`)})
		return err
	}))
	code, out, _ = cli(t, "-database-url", url, "inbox", "show", late.MessageID.String())
	require.Equal(t, 0, code)
	require.Contains(t, out, "late arrival: of "+res.MessageID.String()+" (processed 20")
	require.Contains(t, out, "policy process")
	code, out, _ = cli(t, "-database-url", url, "inbox", "list", "-json")
	require.Equal(t, 0, code)
	require.Equal(t, 1, strings.Count(out, `"redelivery_of":"`+res.MessageID.String()+`"`))
	_, err = pool.Exec(ctx, "DELETE FROM wharf_inbox_messages WHERE id = $1", late.MessageID)
	require.NoError(t, err)

	code, _, errOut := cli(t, "-database-url", url, "inbox", "replay", res.MessageID.String())
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "message cannot be replayed")

	code, out, _ = cli(t, "-database-url", url, "inbox", "forget", "s", "evt_cli")
	require.Equal(t, 0, code)
	require.Contains(t, out, "erased the body and headers of 1 message(s)")

	code, out, _ = cli(t, "-database-url", url, "inbox", "rescue")
	require.Equal(t, 0, code)
	require.Contains(t, out, `rescued 0 stranded message(s) onto new jobs in queue "wharf_inbox"`)
	code, _, errOut = cli(t, "-database-url", url, "inbox", "rescue", "extra")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "inbox rescue takes no arguments")

	code, _, errOut = cli(t, "-database-url", url, "inbox", "show", "not-a-uuid")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "is not a message id")

	code, _, errOut = cli(t, "-database-url", url, "inbox", "list", "-status", "weird")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown status "weird"`)

	// Paging: a full page says how to get the next; the next holds the rest.
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ib.ReceiveManyTx(ctx, tx, []inbox.Incoming{
			{Source: "s", EventID: "evt_p1", Body: []byte(`{}`)}, {Source: "s", EventID: "evt_p2", Body: []byte(`{}`)},
		})
		return err
	}))
	code, out, errOut = cli(t, "-database-url", url, "inbox", "list", "-limit", "2")
	require.Equal(t, 0, code)
	require.Equal(t, 2, strings.Count(out, "evt_p"), out)
	_, cursor, ok := strings.Cut(strings.TrimSpace(errOut), "-after ")
	require.True(t, ok, "no next-page hint: %q", errOut)
	code, out, errOut = cli(t, "-database-url", url, "inbox", "list", "-limit", "2", "-after", cursor)
	require.Equal(t, 0, code)
	require.Contains(t, out, "evt_cli")
	require.NotContains(t, out, "evt_p")
	require.Empty(t, errOut, "the last page has no next")
	code, _, errOut = cli(t, "-database-url", url, "inbox", "list", "-after", "garbage")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "not a cursor")

	// Replay by filter: the dead messages of a source, newest first.
	_, err = pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = 'dead' WHERE event_id LIKE 'evt_p%'")
	require.NoError(t, err)
	code, _, errOut = cli(t, "-database-url", url, "inbox", "replay", "-status", "processed")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "takes dead or failed")
	code, out, _ = cli(t, "-database-url", url, "inbox", "replay", "-status", "dead", "-source", "s", "-since", "1h")
	require.Equal(t, 0, code)
	require.Contains(t, out, "replayed 2 dead message(s)")
	var dead int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM wharf_inbox_messages WHERE status = 'dead' AND event_id LIKE 'evt_p%'").Scan(&dead))
	require.Zero(t, dead)
}

func TestPartitionsAndPrune(t *testing.T) {
	t.Parallel()
	url := testdb.NewURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	recordRetention(t, pool, nil)
	code, out, errOut := cli(t, "-database-url", url, "partitions", "-exact")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "wharf_inbox_messages (retention 30d, oldest unfinished row: none)")
	require.Contains(t, out, "wharf_inbox_messages_p"+time.Now().UTC().Format("20060102"))

	code, out, _ = cli(t, "-database-url", url, "partitions", "-json")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"table": "wharf_inbox_messages"`)

	code, out, errOut = cli(t, "-database-url", url, "prune", "-dry-run")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "would drop 0 partitions; kept 0 expired partitions; would delete 0 dedupe keys, 0 past keys, 0 idempotency keys, 0 deliveries, 0 audit entries; scrubbed 0 messages, 0 events")

	code, _, errOut = cli(t, "-database-url", url, "prune", "-dedupe-window", "1h", "-force")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "-dedupe-window 1h is outside")
}
