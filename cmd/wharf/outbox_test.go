package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
)

// The outbox commands: add (secret printed once), list (table, JSON,
// paging), disable, enable with recovery, rotate-secret, deliveries list and
// show, replay one and every dead one.
func TestOutboxCommands(t *testing.T) {
	t.Parallel()
	url := testdb.NewURL(t)
	sink := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(sink.Close)

	code, _, errOut := cli(t, "-database-url", url, "outbox", "endpoints", "add", "-url", sink.URL)
	require.Equal(t, 2, code, "a loopback URL needs -allow-private")
	require.Contains(t, errOut, "AllowPrivateNetworks")

	code, out, _ := cli(t, "-database-url", url, "outbox", "endpoints", "add", "-url", sink.URL, "-events", "order.*", "-allow-private")
	require.Equal(t, 0, code)
	require.Contains(t, out, "whsec_")
	id := strings.Fields(strings.SplitN(out, "\n", 2)[0])[1]
	code, out, _ = cli(t, "-database-url", url, "outbox", "endpoints", "add", "-url", "https://b.example.com/h")
	require.Equal(t, 0, code)

	code, out, _ = cli(t, "-database-url", url, "outbox", "endpoints", "list")
	require.Equal(t, 0, code)
	require.Contains(t, out, id)
	require.Contains(t, out, "order.*")
	require.NotContains(t, out, "whsec_", "a listing never prints a secret")

	code, out, errOut = cli(t, "-database-url", url, "outbox", "endpoints", "list", "-json", "-limit", "1")
	require.Equal(t, 0, code)
	var ep map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &ep))
	require.Equal(t, id, ep["ID"])
	require.Equal(t, "15s", ep["Timeout"], "durations as Go duration strings")
	_, cursor, ok := strings.Cut(strings.TrimSpace(errOut), "-after ")
	require.True(t, ok, errOut)
	code, out, _ = cli(t, "-database-url", url, "outbox", "endpoints", "list", "-after", cursor)
	require.Equal(t, 0, code)
	require.Contains(t, out, "b.example.com")
	require.NotContains(t, out, id)

	code, out, _ = cli(t, "-database-url", url, "outbox", "endpoints", "disable", id, "-reason", "maintenance")
	require.Equal(t, 0, code, out)
	code, out, _ = cli(t, "-database-url", url, "outbox", "endpoints", "list")
	require.Contains(t, out, "maintenance")
	code, out, _ = cli(t, "-database-url", url, "outbox", "endpoints", "enable", "-recover-since", "1h", id)
	require.Equal(t, 0, code)
	require.Contains(t, out, "recovered 0 missed deliveries")
	code, out, _ = cli(t, "-database-url", url, "outbox", "endpoints", "rotate-secret", id)
	require.Equal(t, 0, code)
	require.Contains(t, out, "new secret (shown once): whsec_")

	// A published event's delivery shows in the listings.
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	defer pool.Close()
	ob, err := outbox.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		_, err := ob.PublishTx(context.Background(), tx, &outbox.Event{Type: "order.created", Data: map[string]int{}})
		return err
	}))
	code, out, _ = cli(t, "-database-url", url, "outbox", "deliveries", "list", "-json", "-endpoint", id)
	require.Equal(t, 0, code)
	var d map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &d))
	require.Equal(t, "pending", d["Status"])
	code, out, _ = cli(t, "-database-url", url, "outbox", "deliveries", "show", d["ID"].(string))
	require.Equal(t, 0, code)
	require.Contains(t, out, "status:    pending")
	require.Contains(t, out, "ATTEMPT")
	code, _, errOut = cli(t, "-database-url", url, "outbox", "deliveries", "list", "-status", "weird")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown status "weird"`)
	code, _, errOut = cli(t, "-database-url", url, "outbox", "deliveries", "show", "nope")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "is not a delivery id")
	code, out, _ = cli(t, "-database-url", url, "outbox", "replay", "-dead", "-endpoint", id, "-since", time.Hour.String())
	require.Equal(t, 0, code)
	require.Contains(t, out, "replayed 0 dead deliveries")
	code, _, errOut = cli(t, "-database-url", url, "outbox", "replay")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "one delivery id")
	code, _, errOut = cli(t, "-database-url", url, "outbox", "sideways")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown outbox command "sideways"`)
}
