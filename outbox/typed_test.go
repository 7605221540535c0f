package outbox_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
)

// InvoicePaid is the data of the catalog's invoice.paid events.
type InvoicePaid struct {
	ID    string `json:"id"`
	Cents int64  `json:"cents"`
}

// invoicePaid is catalogConfig's invoice.paid entry with its data's type.
var invoicePaid = outbox.NewTyped[InvoicePaid](outbox.EventType{
	Name: "invoice.paid", Description: "An invoice was paid.",
	Schema: json.RawMessage(`["id","cents"]`), Example: json.RawMessage(`{"id":"in_1","cents":100}`),
})

// TestTypedPublish: a Typed publishes its data under its type's name,
// checked against the catalog as any event; an event of it can carry an
// ordering key or a tenant.
func TestTypedPublish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := catalogConfig(true)
	cfg.Catalog.Types[0] = invoicePaid.EventType
	bundle := setup(t, cfg)
	sink := okSink(t)
	ep := bundle.endpoint(t, sink.URL(), nil)
	startRiver(t, bundle.pool, bundle.outbox)

	tx, err := bundle.pool.Begin(ctx)
	require.NoError(t, err)
	res, err := invoicePaid.PublishTx(ctx, bundle.outbox, tx, InvoicePaid{ID: "in_7", Cents: 700})
	require.NoError(t, err)
	require.Equal(t, 1, res.Deliveries)
	ev := invoicePaid.Event(InvoicePaid{ID: "in_8", Cents: 800})
	ev.OrderingKey = "in_8"
	_, err = bundle.outbox.PublishTx(ctx, tx, ev)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	bundle.awaitDelivery(t, ep.ID, res.EventID, outbox.StatusSucceeded)
	var got struct {
		Type string      `json:"type"`
		Data InvoicePaid `json:"data"`
	}
	select {
	case rec := <-sink.arrived:
		require.NoError(t, json.Unmarshal(rec.Body, &got))
	case <-time.After(20 * time.Second):
		t.Fatal("nothing arrived")
	}
	require.Equal(t, "invoice.paid", got.Type)
	require.Contains(t, []InvoicePaid{{ID: "in_7", Cents: 700}, {ID: "in_8", Cents: 800}}, got.Data)

	// A strict catalog refuses a Typed it does not list.
	unlisted := outbox.NewTyped[InvoicePaid](outbox.EventType{Name: "invoice.refunded"})
	tx, err = bundle.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = unlisted.PublishTx(ctx, bundle.outbox, tx, InvoicePaid{ID: "in_9"})
	require.ErrorIs(t, err, outbox.ErrInvalidEvent)
}
