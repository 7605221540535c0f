package inbox

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/groupcommit"
	"github.com/wharfhq/wharf/internal/pgxtx"
)

// maxBatchBytes closes a receive batch to bodies that would take it past
// this size: they travel in one parameter, which Postgres caps at 1 GB.
const maxBatchBytes = 64 << 20

// newReceiver returns the group commit of the HTTP handler's deliveries:
// concurrent deliveries share one receive transaction (one WAL flush), and
// each is answered from its own result once that transaction committed.
// While other batches commit, a batch waits up to maxWait for more
// deliveries to join (the busier the database, the larger the batches);
// slots batches commit at once. The batch is everyone's: a client going
// away fails no one else, and only the receive timeout bounds it.
func (ib *Inbox) newReceiver(maxWait time.Duration, slots int) *groupcommit.Batcher[Incoming, Result] {
	cfg := groupcommit.Config[Incoming]{
		MaxSize: ib.batchSize, Slots: slots, Timeout: ib.receiveTimeout, MaxWait: maxWait,
		Weight: func(msg Incoming) int { return len(msg.Body) }, MaxWeight: maxBatchBytes,
	}
	return groupcommit.New(cfg, func(ctx context.Context, msgs []Incoming) ([]Result, []error) {
		var results []Result
		// Pipelined: BEGIN goes with the key claim and the message insert
		// with COMMIT, three round trips in all (see pgxtx.PipelinedTx).
		err := pgxtx.RunPipelined(ctx, ib.pool, func(tx pgx.Tx) error {
			var err error
			results, err = ib.ReceiveManyTx(ctx, tx, msgs)
			return err
		})
		if err != nil {
			return make([]Result, len(msgs)), groupcommit.Fail(len(msgs), err)
		}
		return results, nil
	})
}
