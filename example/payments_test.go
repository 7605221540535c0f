package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
)

func paymentMsg(account string, amount int64) *inbox.Message {
	return &inbox.Message{Body: fmt.Appendf(nil, `{"type":"payment.succeeded","data":{"account":%q,"amount":%d}}`, account, amount)}
}

// TestApplyPaymentsRun: a run of payments to two accounts applies their
// sums, and publishes one balance.updated per payment, in payment order,
// each with the balance right after that payment.
func TestApplyPaymentsRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	require.NoError(t, createTables(ctx, pool))
	_, err := pool.Exec(ctx, "INSERT INTO example_balances VALUES ('acct_a', 100)")
	require.NoError(t, err)
	ob, err := outbox.New(pool, nil)
	require.NoError(t, err)
	msgs := []*inbox.Message{paymentMsg("acct_a", 10), paymentMsg("acct_b", 1), paymentMsg("acct_a", 20), paymentMsg("acct_b", 2), paymentMsg("acct_a", 30)}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return applyPayments(ob, false)(ctx, tx, msgs) }))

	rows, err := pool.Query(ctx, "SELECT payload FROM wharf_outbox_events ORDER BY id")
	require.NoError(t, err)
	payloads, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	require.NoError(t, err)
	var got []string
	for _, p := range payloads {
		var ev struct {
			Type string
			Data struct {
				Account string
				Balance int64
			}
		}
		require.NoError(t, json.Unmarshal(p, &ev))
		require.Equal(t, "balance.updated", ev.Type)
		got = append(got, fmt.Sprintf("%s=%d", ev.Data.Account, ev.Data.Balance))
	}
	require.Equal(t, []string{"acct_a=110", "acct_b=1", "acct_a=130", "acct_b=3", "acct_a=160"}, got)
	var a, b int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT (SELECT balance FROM example_balances WHERE account = 'acct_a'), (SELECT balance FROM example_balances WHERE account = 'acct_b')").Scan(&a, &b))
	require.Equal(t, []int64{160, 3}, []int64{a, b})
}

// TestApplyPaymentsOverflow: payments whose sum leaves int64 fail the run
// (Go's sum would wrap and commit a wrong balance); alone, the second one
// fails in Postgres, as it always did.
func TestApplyPaymentsOverflow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	require.NoError(t, createTables(ctx, pool))
	ob, err := outbox.New(pool, nil)
	require.NoError(t, err)
	h := applyPayments(ob, false)
	big := paymentMsg("acct_x", 5_000_000_000_000_000_000)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return h(ctx, tx, []*inbox.Message{big, big}) })
	require.ErrorContains(t, err, "overflow")
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return h(ctx, tx, []*inbox.Message{big}) }))
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return h(ctx, tx, []*inbox.Message{big}) })
	require.ErrorContains(t, err, "out of range")
	var balance int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT balance FROM example_balances WHERE account = 'acct_x'").Scan(&balance))
	require.Equal(t, int64(5_000_000_000_000_000_000), balance)
}
