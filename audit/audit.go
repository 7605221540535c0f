// Package audit reads Wharf's audit log and names who acts.
//
// Every state-changing action of the inbox and outbox (endpoint create,
// update, disable, enable, secret rotation, delete and recovery; delivery
// and message replay; message skip and erasure) writes one entry in the
// transaction of the action, whether it comes from the tenant portal, the
// dashboard, the CLI or the application's own calls. The entry names the
// actor the context carries: the portal sets the tenant, the dashboard and
// the CLI an operator; an application sets its own with WithActor.
package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/internal/audit"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/shared"
)

// Actor kinds.
const (
	// KindTenant is a tenant acting through the portal or its API.
	KindTenant = audit.KindTenant
	// KindOperator is a person operating Wharf: the dashboard, the CLI,
	// or an identity the application gives.
	KindOperator = audit.KindOperator
	// KindApp is the application, when the context names no actor.
	KindApp = audit.KindApp
)

// Actor is who acts.
type Actor struct {
	// Kind is KindTenant, KindOperator or KindApp.
	Kind string
	// ID names the actor: the tenant, or the operator's identity ("alice",
	// "cli:root"). At most 256 bytes are kept.
	ID string
}

// WithActor returns ctx naming a as the actor of the actions taken with
// it, for the audit log.
func WithActor(ctx context.Context, a Actor) context.Context {
	if len(a.ID) > 256 {
		a.ID = a.ID[:256]
	}
	return audit.WithActor(ctx, audit.Actor{Kind: a.Kind, ID: strings.ToValidUTF8(a.ID, "?")})
}

// Entry is one action.
type Entry struct {
	// ID identifies the entry.
	ID uuid.UUID
	// At is when the action was taken.
	At time.Time
	// Actor is who took it.
	Actor Actor
	// Tenant is the tenant of the object acted on ("" for none).
	Tenant string
	// Action is what was done: "endpoint.create", "endpoint.update",
	// "endpoint.disable", "endpoint.enable", "endpoint.rotate_secret",
	// "endpoint.delete", "endpoint.recover", "endpoint.replay_dead",
	// "delivery.replay", "delivery.redrive", "message.replay", "message.skip",
	// "message.forget", "event.forget", "tenant.forget".
	Action string
	// ObjectType is "endpoint", "delivery", "message", "event", "tenant"
	// or "redrive" (a batch of deliveries, its filter in Details).
	ObjectType string
	// ObjectID is the object's id (an event id for message.forget and
	// event.forget; empty for tenant.forget, whose Tenant it is, and for a
	// redrive).
	ObjectID string
	// Reason is the reason given, if any.
	Reason string
	// Details are the action's particulars as JSON: the fields an update
	// changed, how many deliveries a recovery made. Never a secret.
	Details []byte
}

// ListParams filters List. A nil *ListParams lists the newest 100
// entries.
type ListParams struct {
	// Tenant lists only the entries about that tenant's objects when not
	// nil.
	Tenant *string
	// ObjectID lists only the entries about that object when not empty.
	ObjectID string
	// Limit is the most entries of one page: 1 to 1000, default 100.
	Limit int
	// After is Cursor of the last entry of the previous page.
	After string
}

// ErrInvalidCursor is returned by List for a cursor Cursor did not make.
var ErrInvalidCursor = errors.New("audit: invalid list cursor")

// Cursor returns the list cursor of e.
func Cursor(e *Entry) string { return shared.EncodeTimeCursor(e.At, e.ID) }

// List returns a page of entries, newest first.
func List(ctx context.Context, pool *pgxpool.Pool, params *ListParams) ([]*Entry, error) {
	if params == nil {
		params = &ListParams{}
	}
	limit := params.Limit
	switch {
	case limit == 0:
		limit = 100
	case limit < 0 || limit > 1000:
		return nil, fmt.Errorf("audit: limit must be 1 to 1000")
	}
	q := dbsqlc.AuditListParams{Tenant: params.Tenant, MaxRows: int32(limit)}
	if params.ObjectID != "" {
		q.ObjectID = &params.ObjectID
	}
	if params.After != "" {
		at, id, err := shared.DecodeTimeCursor(params.After)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidCursor, err)
		}
		q.AfterAt, q.AfterID = &at, &id
	}
	rows, err := dbsqlc.New(pool).AuditList(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("audit: list: %w", err)
	}
	out := make([]*Entry, len(rows))
	for i, r := range rows {
		out[i] = &Entry{
			ID: r.ID, At: r.At, Actor: Actor{Kind: r.ActorKind, ID: r.Actor}, Tenant: r.Tenant,
			Action: r.Action, ObjectType: r.ObjectType, ObjectID: r.ObjectID, Reason: r.Reason, Details: r.Details,
		}
	}
	return out, nil
}
