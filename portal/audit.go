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

type auditPage struct {
	Data       []auditEntryJSON `json:"data"`
	NextCursor *string          `json:"next_cursor"`
}

// auditEntries returns a page of the tenant's audit log and the cursor of
// the next.
func (h *Handler) auditEntries(r *http.Request, limit int) ([]*audit.Entry, *string, error) {
	tenant := accessOf(r.Context()).tenant
	entries, err := audit.List(r.Context(), h.cfg.Pool, &audit.ListParams{Tenant: &tenant, Limit: limit + 1, After: r.URL.Query().Get("cursor")})
	if errors.Is(err, audit.ErrInvalidCursor) {
		return nil, nil, &apiError{status: http.StatusBadRequest, msg: "invalid cursor", field: "cursor"}
	}
	if err != nil {
		return nil, nil, err
	}
	var next *string
	if len(entries) > limit {
		entries = entries[:limit]
		c := audit.Cursor(entries[limit-1])
		next = &c
	}
	return entries, next, nil
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
	entries, next, err := h.auditEntries(r, limit)
	if err != nil {
		return err
	}
	page := auditPage{Data: make([]auditEntryJSON, len(entries)), NextCursor: next}
	for i, e := range entries {
		page.Data[i] = auditEntryJSON{
			ID: e.ID, At: e.At.UTC(), Actor: actorOf(e), Action: e.Action, ObjectType: e.ObjectType,
			ObjectID: e.ObjectID, Reason: e.Reason, Details: e.Details,
		}
	}
	writeJSON(w, http.StatusOK, page)
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
	entries, next, err := p.h.auditEntries(r, defaultPageLimit)
	if err != nil {
		return err
	}
	v := &activityView{Entries: make([]activityEntry, len(entries))}
	if next != nil {
		v.Next = *next
	}
	for i, e := range entries {
		who := "you"
		if e.Actor.Kind != audit.KindTenant {
			who = "your provider"
		}
		v.Entries[i] = activityEntry{Entry: e, Who: who}
	}
	p.render(w, r, http.StatusOK, "activity.html", p.view(r, "Activity", v), "")
	return nil
}
