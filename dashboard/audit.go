package dashboard

import (
	"errors"
	"net/http"

	"github.com/wharfhq/wharf/audit"
)

// auditPage is how many entries the audit page lists at once.
const auditPage = 100

// auditLog lists the audit log, newest first, a page at a time.
func (h *Handler) auditLog(w http.ResponseWriter, r *http.Request) {
	params := &audit.ListParams{Limit: auditPage + 1, After: r.URL.Query().Get("after")}
	if tenant := r.URL.Query().Get("tenant"); tenant != "" {
		params.Tenant = &tenant
	}
	entries, err := audit.List(r.Context(), h.pool, params)
	if errors.Is(err, audit.ErrInvalidCursor) {
		h.fail(w, r, http.StatusBadRequest, "That page of the audit log does not exist.", nil)
		return
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The audit log could not be read.", err)
		return
	}
	next := ""
	if len(entries) > auditPage {
		entries = entries[:auditPage]
		next = audit.Cursor(entries[auditPage-1])
	}
	h.render(w, r, http.StatusOK, "audit", map[string]any{"Title": "Audit log", "Entries": entries, "Next": next,
		"Tenant": r.URL.Query().Get("tenant")})
}
