package outbox

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Typed is an event type of the catalog whose data is a T: its entry, for
// Catalog.Types, and the events of it to publish, so that a publish cannot
// send another type's data under its name.
//
//	var BalanceUpdated = outbox.NewTyped[Balance](outbox.EventType{
//		Name:        "balance.updated",
//		Description: "An account's balance changed.",
//	})
//	cfg.Catalog = &outbox.Catalog{Types: []outbox.EventType{BalanceUpdated.EventType}}
//	…
//	_, err := BalanceUpdated.PublishTx(ctx, ob, tx, Balance{Account: "acct_1", Balance: 125})
//
// The catalog still checks the data against the type's Schema, when it
// has one, and a Strict catalog refuses a Typed whose entry it does not
// list.
type Typed[T any] struct {
	EventType
}

// NewTyped returns the catalog entry t with data of type T.
func NewTyped[T any](t EventType) Typed[T] { return Typed[T]{EventType: t} }

// Event returns an event of the type with data, to set its OrderingKey or
// Tenant before PublishTx, PublishManyTx or PublishToTx.
func (t Typed[T]) Event(data T) *Event { return &Event{Type: t.Name, Data: data} }

// PublishTx publishes an event of the type with data in tx (see
// Outbox.PublishTx).
func (t Typed[T]) PublishTx(ctx context.Context, o *Outbox, tx pgx.Tx, data T) (*PublishResult, error) {
	return o.PublishTx(ctx, tx, t.Event(data))
}
