// Package outboxtest seeds the outbox's tables for the tests of its
// engines, which cannot import the outbox package (it imports them): the
// rows outbox.EndpointCreate and outbox.PublishManyTx would store, without
// their River jobs.
package outboxtest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/partition"
)

// Secret is every seeded endpoint's signing secret, stored in plaintext.
const Secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// Seed stores an endpoint ("https://example.com/hook", a 15 s timeout) for
// each of caps (its stored MaxInFlight: 0 is no cap) and events events of
// type "outboxtest", each with a delivery to every endpoint, in one
// statement as PublishManyTx stores them, with today's partitions of
// events and attempts. It returns the endpoints' ids, and the deliveries'
// ids in publish order.
func Seed(t testing.TB, pool *pgxpool.Pool, caps []int32, events int) (endpoints, deliveries []uuid.UUID) {
	t.Helper()
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("outboxtest: seed: %v", err)
		}
	}
	ctx := context.Background()
	q := dbsqlc.New(pool)
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, c := range caps {
		ep, err := q.OutboxEndpointInsert(ctx, dbsqlc.OutboxEndpointInsertParams{
			ID: uuid.Must(uuid.NewV7()), Url: "https://example.com/hook", EventTypes: []string{}, Secret: Secret,
			MaxInFlight: c, TimeoutMs: 15000, Headers: json.RawMessage(`{}`), Auth: json.RawMessage(`{}`), Now: now,
		})
		check(err)
		endpoints = append(endpoints, ep.ID)
	}
	partitions := partition.NewCache(pool)
	check(partitions.Ensure(ctx, nil, "wharf_outbox_events", now))
	check(partitions.Ensure(ctx, nil, "wharf_outbox_attempts", now))
	params := dbsqlc.OutboxPublishParams{CreatedAt: now, FirstAttemptAt: now}
	for range events {
		params.Ids = append(params.Ids, uuid.Must(uuid.NewV7()).String())
		params.Types = append(params.Types, "outboxtest")
		params.Payloads = append(params.Payloads, []byte(`{"type":"outboxtest","data":{}}`))
		params.OrderingKeys = append(params.OrderingKeys, "")
		params.Tenants = append(params.Tenants, "")
		params.Filterable = append(params.Filterable, false)
	}
	_, err := q.OutboxPublish(ctx, params)
	check(err)
	rows, err := pool.Query(ctx, `SELECT id FROM wharf_outbox_deliveries ORDER BY seq`)
	check(err)
	deliveries, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	check(err)
	return endpoints, deliveries
}
