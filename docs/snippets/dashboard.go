package snippets

import (
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/dashboard"
	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/outbox"
)

// mountDashboard is the README's dashboard mounting.
func mountDashboard(mux *http.ServeMux, pool *pgxpool.Pool, ib *inbox.Inbox, ob *outbox.Outbox, requireAdmin func(http.Handler) http.Handler) error {
	// readme:begin dashboard
	dash, err := dashboard.New(pool, &dashboard.Config{Inbox: ib, Outbox: ob, Prefix: "/ops/wharf"})
	if err != nil {
		return err
	}
	mux.Handle("/ops/wharf/", requireAdmin(dash)) // your auth in front, as for riverui
	// readme:end
	return nil
}
