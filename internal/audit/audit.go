// Package audit writes the audit log: one row per state-changing action,
// in the action's transaction, naming the actor the context carries.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// Actor kinds.
const (
	KindTenant   = "tenant"
	KindOperator = "operator"
	KindApp      = "app"
)

// Actor is who acts: a tenant through the portal, an operator (dashboard,
// CLI, or an identity the application supplies), or the application.
type Actor struct {
	Kind string
	ID   string
}

type actorKey struct{}

// WithActor returns ctx carrying a.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorOf returns the actor ctx carries, or the application.
func ActorOf(ctx context.Context) Actor {
	if a, ok := ctx.Value(actorKey{}).(Actor); ok {
		return a
	}
	return Actor{Kind: KindApp}
}

// Record is one action.
type Record struct {
	Tenant     string
	Action     string // "endpoint.create", "delivery.replay", …
	ObjectType string // "endpoint", "delivery", "message"
	ObjectID   string
	Reason     string
	Details    map[string]any
}

// Write records r, done by ctx's actor at now, through db (the action's
// transaction).
func Write(ctx context.Context, db dbsqlc.DBTX, now time.Time, r Record) error {
	details := []byte("{}")
	if len(r.Details) > 0 {
		var err error
		if details, err = json.Marshal(r.Details); err != nil {
			return fmt.Errorf("audit: %w", err)
		}
	}
	id, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	a := ActorOf(ctx)
	err = dbsqlc.New(db).AuditInsert(ctx, dbsqlc.AuditInsertParams{
		ID: id, At: now, ActorKind: a.Kind, Actor: a.ID, Tenant: r.Tenant, Action: r.Action,
		ObjectType: r.ObjectType, ObjectID: r.ObjectID, Reason: r.Reason, Details: details,
	})
	if err != nil {
		return fmt.Errorf("audit: record %s: %w", r.Action, err)
	}
	return nil
}
