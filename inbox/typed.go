package inbox

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// TypedHandler is a Handler that gets the message's body decoded into a T
// (see HandleJSON).
type TypedHandler[T any] func(ctx context.Context, tx pgx.Tx, msg *Message, ev *T) error

// TypedBatchHandler is a BatchHandler that gets each message's body
// decoded into a T, evs[i] msgs[i]'s (see HandleBatchJSON).
type TypedBatchHandler[T any] func(ctx context.Context, tx pgx.Tx, msgs []*Message, evs []*T) error

// HandleJSON registers h for messages of source with eventType, as
// Handle does (the same wildcards and precedence), with each message's
// body decoded into a new T (encoding/json) before h runs. A body that
// does not decode into a T fails its message permanently (see
// Permanent): it is dead at once, its last error the decoding error, and
// can be replayed once the type or the handler is fixed.
//
//	type PaymentSucceeded struct {
//		Data struct {
//			Account string `json:"account"`
//			Amount  int64  `json:"amount"`
//		} `json:"data"`
//	}
//	inbox.HandleJSON(ib, "payments", "payment.succeeded",
//		func(ctx context.Context, tx pgx.Tx, msg *inbox.Message, ev *PaymentSucceeded) error { … })
func HandleJSON[T any](ib *Inbox, source, eventType string, h TypedHandler[T]) {
	if h == nil {
		panic("inbox: HandleJSON with a nil handler")
	}
	ib.Handle(source, eventType, func(ctx context.Context, tx pgx.Tx, msg *Message) error {
		ev, err := decodeBody[T](msg)
		if err != nil {
			return err
		}
		return h(ctx, tx, msg, ev)
	})
}

// HandleBatchJSON registers h for messages of source with eventType, as
// HandleBatch does, with each message's body decoded into a new T first.
// A body that does not decode fails the call, so that the messages go
// again one by one (see BatchHandler), and that message's alone fails
// permanently, with the decoding error, as with HandleJSON.
func HandleBatchJSON[T any](ib *Inbox, source, eventType string, h TypedBatchHandler[T]) {
	if h == nil {
		panic("inbox: HandleBatchJSON with a nil handler")
	}
	ib.HandleBatch(source, eventType, func(ctx context.Context, tx pgx.Tx, msgs []*Message) error {
		evs := make([]*T, len(msgs))
		for i, msg := range msgs {
			ev, err := decodeBody[T](msg)
			if err != nil {
				return err
			}
			evs[i] = ev
		}
		return h(ctx, tx, msgs, evs)
	})
}

// decodeBody decodes msg's body into a new T; the error is permanent.
func decodeBody[T any](msg *Message) (*T, error) {
	ev := new(T)
	if err := json.Unmarshal(msg.Body, ev); err != nil {
		return nil, Permanent(fmt.Errorf("inbox: decode the body of message %s into %T: %w", msg.ID, *ev, err))
	}
	return ev, nil
}
