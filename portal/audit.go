package portal

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/wharfhq/wharf/audit"
)

type auditActor struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

type auditEntryJSON struct {
	ID         uuid.UUID       `json:"id"`
	At         time.Time       `json:"at"`
	Actor      auditActor      `json:"actor"`
	Action     string          `json:"action"`
	ObjectType string          `json:"object_type"`
	ObjectID   string          `json:"object_id"`
	Reason     string          `json:"reason"`
	Details    json.RawMessage `json:"details"`
}

// auditEntries returns a page of the tenant's audit log.
func (h *Handler) auditEntries(r *http.Request, limit int) (page[*audit.Entry], error) {
	tenant := accessOf(r.Context()).tenant
	entries, err := audit.List(r.Context(), h.cfg.Pool, &audit.ListParams{Tenant: &tenant, Limit: limit + 1, After: r.URL.Query().Get("cursor")})
	if errors.Is(err, audit.ErrInvalidCursor) {
		return page[*audit.Entry]{}, &apiError{status: http.StatusBadRequest, msg: "invalid cursor", field: "cursor"}
	}
	if err != nil {
		return page[*audit.Entry]{}, err
	}
	return pageOf(entries, limit, audit.Cursor, func(e *audit.Entry) *audit.Entry { return e }), nil
}

// actorOf is who a tenant is shown as having acted: itself by name;
// operators and the application only by kind, so staff names stay
// inside.
func actorOf(e *audit.Entry) auditActor {
	if e.Actor.Kind == audit.KindTenant {
		return auditActor{Kind: e.Actor.Kind, ID: e.Actor.ID}
	}
	return auditActor{Kind: e.Actor.Kind, ID: ""}
}

func (h *Handler) listAuditLog(w http.ResponseWriter, r *http.Request) error {
	limit, err := pageLimit(r)
	if err != nil {
		return err
	}
	entries, err := h.auditEntries(r, limit)
	if err != nil {
		return err
	}
	out := page[auditEntryJSON]{Data: make([]auditEntryJSON, len(entries.Data)), NextCursor: entries.NextCursor}
	for i, e := range entries.Data {
		out.Data[i] = auditEntryJSON{
			ID: e.ID, At: e.At.UTC(), Actor: actorOf(e), Action: e.Action, ObjectType: e.ObjectType,
			ObjectID: e.ObjectID, Reason: e.Reason, Details: e.Details,
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

type activityView struct {
	Entries []activityEntry
	Next    string
}

type activityEntry struct {
	*audit.Entry
	Who string
}

func (p *pages) activity(w http.ResponseWriter, r *http.Request) error {
	entries, err := p.h.auditEntries(r, defaultPageLimit)
	if err != nil {
		return err
	}
	v := &activityView{Entries: make([]activityEntry, len(entries.Data))}
	if entries.NextCursor != nil {
		v.Next = *entries.NextCursor
	}
	for i, e := range entries.Data {
		who := "you"
		if e.Actor.Kind != audit.KindTenant {
			who = "your provider"
		}
		v.Entries[i] = activityEntry{Entry: e, Who: who}
	}
	p.render(w, r, http.StatusOK, "activity.html", p.view(r, "Activity", v), "")
	return nil
}
