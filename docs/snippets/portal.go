package snippets

import (
	"context"
	"encoding/json"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/portal"
)

// mountPortal is docs/portal.md's mounting example.
func mountPortal(mux *http.ServeMux, pool *pgxpool.Pool, out *outbox.Outbox) error {
	// readme:begin portal-mount
	key, err := portal.ParseKey(os.Getenv("PORTAL_KEY")) // openssl rand -base64 32
	if err != nil {
		return err
	}
	h, err := portal.New(&portal.Config{
		Outbox: out, Pool: pool,
		Keys:   [][]byte{key},
		Prefix: "/portal",
		Name:   "Acme Payments",
	})
	if err != nil {
		return err
	}
	mux.Handle("/portal/", h)
	// readme:end
	return nil
}

// catalogOutbox is docs/portal.md's event catalog example; compile is
// jsonschema.Compile, from the module github.com/wharfhq/wharf/jsonschema
// (which this module does not depend on).
func catalogOutbox(pool *pgxpool.Pool, compile outbox.SchemaCompiler) (*outbox.Outbox, error) {
	// readme:begin event-catalog
	out, err := outbox.New(pool, &outbox.Config{Catalog: &outbox.Catalog{
		Compile: compile, // jsonschema.Compile: module github.com/wharfhq/wharf/jsonschema
		Strict:  true,
		Types: []outbox.EventType{{
			Name:        "invoice.paid",
			Description: "An invoice was paid in full.",
			Schema:      json.RawMessage(`{"type": "object", "required": ["invoice_id", "cents"]}`),
			Example:     json.RawMessage(`{"invoice_id": "in_1", "cents": 1200}`),
		}},
	}})
	// readme:end
	return out, err
}

// InvoicePaid is the data of docs/portal.md's typed event.
type InvoicePaid struct {
	InvoiceID string `json:"invoice_id"`
	Cents     int64  `json:"cents"`
}

// typedPublish is docs/portal.md's typed event: a catalog entry with the
// Go type of its data, published in the app's transaction.
func typedPublish(ctx context.Context, pool *pgxpool.Pool, compile outbox.SchemaCompiler) error {
	// readme:begin typed-event
	invoicePaid := outbox.NewTyped[InvoicePaid](outbox.EventType{
		Name:        "invoice.paid",
		Description: "An invoice was paid in full.",
		Schema:      json.RawMessage(`{"type": "object", "required": ["invoice_id", "cents"]}`),
		Example:     json.RawMessage(`{"invoice_id": "in_1", "cents": 1200}`),
	})
	ob, err := outbox.New(pool, &outbox.Config{Catalog: &outbox.Catalog{
		Compile: compile, Strict: true, Types: []outbox.EventType{invoicePaid.EventType},
	}})
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Only an InvoicePaid compiles here; the catalog still checks it
		// against the schema.
		_, err := invoicePaid.PublishTx(ctx, ob, tx, InvoicePaid{InvoiceID: "in_7", Cents: 700})
		return err
	})
	// readme:end
}
