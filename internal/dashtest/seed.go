// Package dashtest seeds a database with what the dashboard shows, for the
// dashboard's tests and the browser test (module e2e): messages of two
// sources processed, dead and duplicated, and an endpoint with succeeded
// and dead deliveries, all made by the real inbox, outbox and River
// workers.
package dashtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/outbox"
)

// Seeded names what Seed made.
type Seeded struct {
	// DeadMessage is the id of a dead inbox message of source "billing"
	// whose event id is DeadEventID and type "invoice.broken".
	DeadMessage uuid.UUID
	DeadEventID string
	// Processed counts the processed messages; Dead the dead ones.
	Processed, Dead int
	// Endpoint is the id of the endpoint; EndpointURL its URL, whose user
	// info holds EndpointPassword.
	Endpoint         uuid.UUID
	EndpointURL      string
	EndpointPassword string
	// DeadDelivery is a dead delivery of Endpoint; Succeeded counts the
	// succeeded ones.
	DeadDelivery uuid.UUID
	Succeeded    int
	// SignatureValue is the value of the webhook-signature header stored
	// with every message (which the dashboard must redact).
	SignatureValue string
}

// Seed fills pool's (migrated, empty) database: 12 messages of "billing"
// and 5 of "shipping", 3 of billing's dead (their handler fails
// permanently) and 4 deliveries duplicated; an endpoint with 3 succeeded
// and 2 dead deliveries. River's workers run until everything is settled,
// then stop.
func Seed(tb testing.TB, pool *pgxpool.Pool) *Seeded {
	tb.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := &Seeded{SignatureValue: "v1,c2lnbmF0dXJlLXRoYXQtbXVzdC1ub3Qtc2hvdw==", EndpointPassword: "hunter2-not-shown"}

	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("fail") != "" {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer sink.Close()

	ib, err := inbox.New(pool, &inbox.Config{Logger: quiet, MaxAttempts: 2})
	must(tb, err)
	ib.Handle("*", "*", func(_ context.Context, _ pgx.Tx, m *inbox.Message) error {
		if m.EventType == "invoice.broken" {
			return inbox.Permanent(errors.New("no account for customer cus_42"))
		}
		return nil
	})
	// The failing endpoint's fourth failure, the last attempt of its
	// second dead delivery, opens its circuit.
	ob, err := outbox.New(pool, &outbox.Config{Logger: quiet, AllowPrivateNetworks: true,
		RetrySchedule: []time.Duration{0, time.Millisecond}, RetryJitter: -1, CircuitBreakerThreshold: 4})
	must(tb, err)

	// The endpoint's URL carries a password, which pages must mask; it has
	// a rate limit. A second endpoint, subscribed to order.refunded only,
	// always gets 502.
	u := "http://ops:" + s.EndpointPassword + "@" + sink.Listener.Addr().String() + "/hooks"
	ep, err := ob.EndpointCreate(ctx, &outbox.EndpointParams{URL: u, Description: "orders service",
		RateLimit: &outbox.RateLimit{PerSecond: 50, Burst: 10}})
	must(tb, err)
	s.Endpoint, s.EndpointURL = ep.ID, u
	failing, err := ob.EndpointCreate(ctx, &outbox.EndpointParams{URL: sink.URL + "/hooks?fail=1", Description: "always 502", EventTypes: []string{"order.refunded"}})
	must(tb, err)

	var incoming []inbox.Incoming
	for i := range 12 {
		typ := "invoice.paid"
		if i < 3 {
			typ = "invoice.broken"
		}
		incoming = append(incoming, message("billing", fmt.Sprintf("evt_billing_%02d", i), typ, s.SignatureValue))
	}
	for i := range 5 {
		incoming = append(incoming, message("shipping", fmt.Sprintf("evt_ship_%02d", i), "parcel.sent", s.SignatureValue))
	}
	// Duplicates: four redeliveries of events already received.
	dups := []inbox.Incoming{incoming[4], incoming[5], incoming[5], incoming[13]}
	for _, batch := range [][]inbox.Incoming{incoming, dups} {
		must(tb, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ib.ReceiveManyTx(ctx, tx, batch)
			return err
		}))
	}
	s.DeadEventID = "evt_billing_00"
	s.Processed, s.Dead = 14, 3

	must(tb, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range 3 {
			if _, err := ob.PublishTx(ctx, tx, &outbox.Event{Type: "order.paid", Data: map[string]any{"order": i, "total_cents": 1000 + i}}); err != nil {
				return err
			}
		}
		for i := range 2 {
			if _, err := ob.PublishTx(ctx, tx, &outbox.Event{Type: "order.refunded", Data: map[string]any{"order": 100 + i}}); err != nil {
				return err
			}
		}
		return nil
	}))
	// ep gets all five (3 paid, 2 refunded), failing gets the 2 refunded.
	s.Succeeded = 5

	workers := river.NewWorkers()
	must(tb, ib.AddWorkers(workers))
	must(tb, ob.AddWorkers(workers))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{ib.Queue(): {MaxWorkers: 4}, ob.Queue(): {MaxWorkers: 4}},
		Workers:           workers,
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		RetryPolicy:       fastRetry{},
		Logger:            quiet,
		TestOnly:          true,
	})
	must(tb, err)
	must(tb, client.Start(ctx))
	defer func() { must(tb, client.Stop(ctx)) }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		var unsettledMessages, unsettledDeliveries int
		must(tb, pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM wharf_inbox_messages WHERE status NOT IN ('processed', 'dead')),
			(SELECT count(*) FROM wharf_outbox_deliveries WHERE status NOT IN ('succeeded', 'dead'))`).
			Scan(&unsettledMessages, &unsettledDeliveries))
		if unsettledMessages == 0 && unsettledDeliveries == 0 {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("dashtest: seed not settled after 30s: %d messages, %d deliveries", unsettledMessages, unsettledDeliveries)
		}
		time.Sleep(20 * time.Millisecond)
	}
	msgs, err := ib.List(ctx, &inbox.ListParams{Source: "billing", EventID: s.DeadEventID})
	must(tb, err)
	if len(msgs) != 1 || msgs[0].Status != inbox.StatusDead {
		tb.Fatalf("dashtest: %s is not dead: %+v", s.DeadEventID, msgs)
	}
	s.DeadMessage = msgs[0].ID
	dead, err := ob.DeliveryList(ctx, &outbox.DeliveryListParams{EndpointID: &failing.ID, Status: outbox.StatusDead})
	must(tb, err)
	if len(dead) != 2 {
		tb.Fatalf("dashtest: %d dead deliveries, want 2", len(dead))
	}
	s.DeadDelivery = dead[0].ID
	return s
}

func message(source, id, typ, sig string) inbox.Incoming {
	body := fmt.Sprintf(`{"id":%q,"type":%q,"data":{"customer":"cus_42","amount":1999}}`, id, typ)
	return inbox.Incoming{Source: source, EventID: id, EventType: typ, Body: []byte(body),
		Header: http.Header{"Content-Type": {"application/json"}, "Webhook-Signature": {sig}, "Webhook-Id": {id}}}
}

// fastRetry retries after 10 ms: the seed does not wait for real backoff.
type fastRetry struct{}

func (fastRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(10 * time.Millisecond) }

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
