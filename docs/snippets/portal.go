package snippets

import (
	"encoding/json"
	"net/http"
	"os"

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
