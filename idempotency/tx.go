package idempotency

import (
	"context"

	"github.com/jackc/pgx/v5"
)

type txContextKey struct{}

// Tx returns the transaction a transactional Middleware runs the handler in,
// or nil when there is none: the middleware is not transactional, or the
// request's method is not one it applies to.
//
// Writes made through it commit together with the idempotency key when the
// handler answers below 500, and roll back together with it otherwise. The
// transaction is a savepoint inside the middleware's own: Commit makes the
// handler's writes part of the outcome (they become durable when the
// middleware commits), Rollback undoes them while the key stays claimed, so
// that a handler can undo its work and still answer, say, 422. The handler
// must not use it after returning.
func Tx(ctx context.Context) pgx.Tx {
	tx, _ := ctx.Value(txContextKey{}).(pgx.Tx)
	return tx
}

func withTx(ctx context.Context, tx pgx.Tx) context.Context {
	return context.WithValue(ctx, txContextKey{}, tx)
}
