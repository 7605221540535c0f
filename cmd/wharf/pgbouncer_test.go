package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/signature"
)

// TestCommandsThroughPgBouncer: the CLI's reads, replays and prunes work
// through PgBouncer in transaction mode, in pgx's exec and simple_protocol
// modes; migrate commands refuse the pooler at once and say to use a
// direct connection.
func TestCommandsThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range testdb.Modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, url := testdb.NewPooled(t, mode)
			ib, err := inbox.New(pool, &inbox.Config{Sources: []inbox.Source{{Name: "s", Verifier: signature.VerifierFunc(nil)}}})
			require.NoError(t, err)
			var res *inbox.Result
			require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				res, err = ib.ReceiveTx(ctx, tx, inbox.Incoming{Source: "s", EventID: "evt_pooled", EventType: "t", Body: []byte(`{"k":"v"}`)})
				return err
			}))
			id := res.MessageID.String()
			// As if its handler had failed for good.
			_, err = pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = 'dead' WHERE id = $1", res.MessageID)
			require.NoError(t, err)

			code, out, errOut := cli(t, "-database-url", url, "inbox", "list", "-status", "dead")
			require.Equal(t, 0, code, errOut)
			require.Contains(t, out, id)
			code, out, errOut = cli(t, "-database-url", url, "inbox", "show", id)
			require.Equal(t, 0, code, errOut)
			require.Contains(t, out, `{"k":"v"}`)
			code, _, errOut = cli(t, "-database-url", url, "inbox", "replay", id)
			require.Equal(t, 0, code, errOut)
			code, out, errOut = cli(t, "-database-url", url, "inbox", "list", "-status", "received")
			require.Equal(t, 0, code, errOut)
			require.Contains(t, out, id, "replayed")

			code, out, errOut = cli(t, "-database-url", url, "partitions", "-exact")
			require.Equal(t, 0, code, errOut)
			require.Contains(t, out, "wharf_inbox_messages_p"+time.Now().UTC().Format("20060102"))
			recordRetention(t, pool, nil) // as the application's periodic jobs do
			code, out, errOut = cli(t, "-database-url", url, "prune")
			require.Equal(t, 0, code, errOut)
			require.Contains(t, out, "dropped 0 partitions")
			code, out, errOut = cli(t, "-database-url", url, "inbox", "forget", "s", "evt_pooled")
			require.Equal(t, 0, code, errOut)
			require.Contains(t, out, "erased the body and headers of 1 message(s)")

			for _, args := range [][]string{{"migrate", "status"}, {"migrate", "up"}} {
				start := time.Now()
				code, _, errOut = cli(t, append([]string{"-database-url", url}, args...)...)
				require.Equal(t, 1, code, args)
				require.Contains(t, errOut, "migrations need a direct connection to Postgres", args)
				require.Less(t, time.Since(start), 10*time.Second, "refused at once, not after a wait")
			}
		})
	}
}
