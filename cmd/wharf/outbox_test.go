package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
)

// The outbox commands: add (secret printed once), list (table, JSON,
// paging), disable, enable with recovery, rotate-secret, deliveries list and
// show, replay one, every dead one and by filter.
func TestOutboxCommands(t *testing.T) {
	t.Parallel()
	url := testdb.NewURL(t)
	sink := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(sink.Close)

	code, _, errOut := cli(t, "-database-url", url, "outbox", "endpoints", "add", "-url", sink.URL)
	require.Equal(t, 2, code, "a loopback URL needs -allow-private")
	require.Contains(t, errOut, "pass -allow-private")

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
	require.Contains(t, out, "status:       pending")
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

	// Replay by filter: dead-letter the delivery as a 503 would have.
	_, err = pool.Exec(context.Background(), "UPDATE wharf_outbox_deliveries SET status = 'dead', last_status_code = 503 WHERE id = $1", d["ID"])
	require.NoError(t, err)
	code, out, _ = cli(t, "-database-url", url, "outbox", "replay", "-dead", "-codes", "4xx", "-dry-run")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "would replay 0 dead deliveries")
	code, out, _ = cli(t, "-database-url", url, "outbox", "replay", "-dead", "-codes", "500-599", "-type", "order.*", "-since", time.Now().Add(-time.Hour).Format(time.RFC3339), "-dry-run")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "would replay 1 dead deliveries; changed nothing")
	code, out, _ = cli(t, "-database-url", url, "outbox", "replay", "-dead", "-codes", "5xx", "-endpoint", id)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "replayed 1 dead deliveries in 1 batch(es)")
	var status string
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT status FROM wharf_outbox_deliveries WHERE id = $1", d["ID"]).Scan(&status))
	require.Equal(t, "pending", status)
	for _, bad := range [][]string{
		{"-dead", "-codes", "6xx"}, {"-dead", "-codes", "599-500"}, {"-dead", "-since", "yesterday"},
		{"-dead", "-succeeded"}, {"-dead", "-type", "a b"}, {"-dead", "-batch", "0"}, {"-dead", d["ID"].(string)},
	} {
		code, _, errOut = cli(t, append([]string{"-database-url", url, "outbox", "replay"}, bad...)...)
		require.Equal(t, 2, code, "%v: %s", bad, errOut)
	}
	code, _, errOut = cli(t, "-database-url", url, "outbox", "replay")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "one delivery id")
	code, _, errOut = cli(t, "-database-url", url, "outbox", "sideways")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown outbox command "sideways"`)
}

// The endpoints listing shows each endpoint's circuit and rate limit: a
// circuit opened by failing deliveries reads "open until …" (and "open"
// in -json), enabling closes it; add takes -rate and -burst.
func TestOutboxEndpointsCircuitAndRate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.NewURL(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(failing.Close)

	code, out, _ := cli(t, "-database-url", url, "outbox", "endpoints", "add", "-url", "https://limited.example/h", "-events", "y", "-rate", "5", "-burst", "10")
	require.Equal(t, 0, code, out)
	code, _, errOut := cli(t, "-database-url", url, "outbox", "endpoints", "add", "-url", "https://b.example/h", "-burst", "10")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "-burst needs -rate")

	// A delivery that fails once opens the circuit (threshold 1) for an hour.
	ob, err := outbox.New(pool, &outbox.Config{
		AllowPrivateNetworks: true, RetrySchedule: []time.Duration{0, time.Hour},
		CircuitBreakerThreshold: 1, CircuitBreakerCooldown: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	ep, err := ob.EndpointCreate(ctx, &outbox.EndpointParams{URL: failing.URL, EventTypes: []string{"x"}})
	require.NoError(t, err)
	workers := river.NewWorkers()
	require.NoError(t, ob.AddWorkers(workers))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{ob.Queue(): {MaxWorkers: 2}},
		Workers: workers, FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.PublishTx(ctx, tx, &outbox.Event{Type: "x", Data: map[string]int{}})
		return err
	}))
	require.Eventually(t, func() bool {
		got, err := ob.EndpointGet(ctx, ep.ID)
		require.NoError(t, err)
		return got.CircuitState == outbox.CircuitOpen
	}, 15*time.Second, 10*time.Millisecond)
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, client.Stop(stopCtx))

	code, out, _ = cli(t, "-database-url", url, "outbox", "endpoints", "list")
	require.Equal(t, 0, code)
	require.Contains(t, out, "CIRCUIT")
	require.Contains(t, out, "RATE LIMIT")
	require.Contains(t, out, "5/s burst 10")
	lines := strings.Split(out, "\n")
	var failingLine string
	for _, line := range lines {
		if strings.HasPrefix(line, ep.ID.String()) {
			failingLine = line
		}
	}
	require.Contains(t, failingLine, "open until ")
	require.Regexp(t, `^\S+\s+https://limited\.example/h\s+y\s+true\s+closed\s+5/s burst 10`, lines[1])

	code, out, _ = cli(t, "-database-url", url, "outbox", "endpoints", "list", "-json")
	require.Equal(t, 0, code)
	var listed []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		listed = append(listed, m)
	}
	require.Equal(t, "closed", listed[0]["CircuitState"])
	require.Equal(t, map[string]any{"PerSecond": 5.0, "Burst": 10.0}, listed[0]["RateLimit"])
	require.Equal(t, "open", listed[1]["CircuitState"])
	require.NotNil(t, listed[1]["CircuitOpenUntil"])

	// A delivery published while the circuit is open is due now, but waits
	// for the circuit: the listings say until when, its type and its
	// endpoint's URL.
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.PublishTx(ctx, tx, &outbox.Event{Type: "x", Data: map[string]int{}})
		return err
	}))
	opened, err := ob.EndpointGet(ctx, ep.ID)
	require.NoError(t, err)
	code, out, errOut = cli(t, "-database-url", url, "outbox", "deliveries", "list", "-endpoint", ep.ID.String(), "-status", "pending")
	require.Equal(t, 0, code, errOut)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Regexp(t, `^ID\s+EVENT\s+TYPE\s+ENDPOINT\s+STATUS\s+ATTEMPTS\s+NEXT ATTEMPT\s`, lines[0])
	require.Regexp(t, `\sx\s+`+regexp.QuoteMeta(failing.URL)+`\s+pending\s+0\s+`+
		regexp.QuoteMeta(opened.CircuitOpenUntil.Format(time.RFC3339))+` \(held by open circuit\)`, lines[1])
	code, out, _ = cli(t, "-database-url", url, "outbox", "deliveries", "list", "-endpoint", ep.ID.String(), "-status", "pending", "-json")
	require.Equal(t, 0, code)
	var pending map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &pending))
	require.Equal(t, "x", pending["EventType"])
	require.Equal(t, failing.URL, pending["Endpoint"])
	require.Equal(t, true, pending["HeldByCircuit"])
	code, out, _ = cli(t, "-database-url", url, "outbox", "deliveries", "show", pending["ID"].(string))
	require.Equal(t, 0, code)
	require.Contains(t, out, "type:         x\n")
	require.Contains(t, out, "endpoint:     "+failing.URL+" ("+ep.ID.String()+")\n")
	require.Contains(t, out, "next attempt: "+opened.CircuitOpenUntil.Format(time.RFC3339)+" (held by open circuit)\n")

	code, out, _ = cli(t, "-database-url", url, "outbox", "endpoints", "enable", ep.ID.String())
	require.Equal(t, 0, code)
	require.Contains(t, out, "circuit is closed")
	code, out, _ = cli(t, "-database-url", url, "outbox", "endpoints", "list")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "open until")
}

// TestOutboxRescue: `wharf outbox rescue` runs the outbox's Rescue, as
// `wharf inbox rescue` runs the inbox's: a delivery whose job was deleted
// gets a new one in the queue given.
func TestOutboxRescue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.NewURL(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	ob, err := outbox.New(pool, nil)
	require.NoError(t, err)
	_, err = ob.EndpointCreate(ctx, &outbox.EndpointParams{URL: "https://a.example.com/h"})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.PublishTx(ctx, tx, &outbox.Event{Type: "order.created", Data: map[string]int{"n": 1}})
		return err
	}))
	// Its job deleted behind Wharf's back, a while ago.
	_, err = pool.Exec(ctx, `DELETE FROM river_job`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE wharf_outbox_deliveries SET updated_at = now() - interval '10 minutes', next_attempt_at = now() - interval '10 minutes'`)
	require.NoError(t, err)

	code, out, errOut := cli(t, "-database-url", url, "outbox", "rescue", "-queue", "app_outbox")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `settled 1 delivery(ies)`)
	var queue string
	require.NoError(t, pool.QueryRow(ctx, `SELECT queue FROM river_job WHERE kind = $1`, outbox.DeliveryKind).Scan(&queue))
	require.Equal(t, "app_outbox", queue)

	code, _, errOut = cli(t, "-database-url", url, "outbox", "rescue", "extra")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "outbox rescue takes no arguments")
}
