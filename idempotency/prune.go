package idempotency

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// DeleteExpired deletes the idempotency keys that have expired and returns
// how many it deleted. Expiry is judged by the database's clock, which set
// each key's expiry, never by the caller's: a node whose clock runs ahead
// must not delete a key that a retry may still need. It is the pruning step for a periodic
// job; a middleware never needs it for correctness, since it treats an
// expired key as unused anyway.
//
// It deletes at most batchSize keys per statement, each statement its own
// short transaction, oldest expiry first, and repeats until a statement
// deletes fewer than batchSize, so no call holds locks on or writes WAL for
// more than one batch at a time. Keys that a request in flight has locked are
// skipped, not waited for; a later call takes them. Each key's expiry was
// fixed when it was claimed (from the KeyRetention of the middleware that
// claimed it), so one call serves every route. It is safe to run on several
// nodes at once.
//
// ctx is checked between batches: when it ends, DeleteExpired returns the
// count so far with ctx's error. A nil pool or a batchSize below 1 or above
// math.MaxInt32 is an error, and nothing is deleted.
func DeleteExpired(ctx context.Context, pool *pgxpool.Pool, batchSize int) (int, error) {
	switch {
	case pool == nil:
		return 0, errors.New("idempotency: DeleteExpired: pool is nil")
	case batchSize < 1 || batchSize > math.MaxInt32:
		return 0, fmt.Errorf("idempotency: DeleteExpired: batchSize %d is outside 1..%d", batchSize, math.MaxInt32)
	}
	q := dbsqlc.New(pool)
	deleted := 0
	for {
		if err := ctx.Err(); err != nil {
			return deleted, err
		}
		n, err := q.IdempotencyKeyDeleteExpired(ctx, int32(batchSize))
		deleted += int(n)
		if err != nil {
			return deleted, fmt.Errorf("idempotency: delete expired keys: %w", err)
		}
		if n < int64(batchSize) {
			return deleted, nil
		}
	}
}
