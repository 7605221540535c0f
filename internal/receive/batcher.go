package receive

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/groupcommit"
	"github.com/wharfhq/wharf/internal/pgxtx"
)

// maxBatchBytes closes a receive batch to bodies that would take it past
// this size: they travel in one parameter, which Postgres caps at 1 GB.
const maxBatchBytes = 64 << 20

// commitSlots is how many receive batches commit at once: the rest of the
// pool serves the workers, and deliveries that wait for a slot join the
// waiting batch instead of taking a connection each (two slots gave
// larger batches and more throughput than four on the 2-core machine of
// docs/performance.md's figures).
const commitSlots = 2

// Receive receives msg in a transaction it shares with concurrent calls,
// and returns its result once that transaction committed.
func (r *Receiver) Receive(ctx context.Context, msg Message) (Result, error) {
	return r.batcher.Do(ctx, msg)
}

// Gathering is how many deliveries the open batch (the one taking
// members, not yet committing) holds.
func (r *Receiver) Gathering() int { return r.batcher.Gathering() }

// newBatcher returns the group commit of the HTTP handler's deliveries:
// concurrent deliveries share one receive transaction (one WAL flush), and
// each is answered from its own result once that transaction committed.
// While other batches commit, a batch waits up to BatchWait for more
// deliveries to join (the busier the database, the larger the batches);
// commitSlots batches commit at once. The batch is everyone's: a client
// going away fails no one else, and only the receive timeout bounds it.
func (r *Receiver) newBatcher() *groupcommit.Batcher[Message, Result] {
	slots := commitSlots
	if r.config.BatchSize <= 1 {
		slots = int(r.config.Pool.Config().MaxConns) // no batching: a connection each
	}
	cfg := groupcommit.Config[Message]{
		MaxSize: r.config.BatchSize, Slots: slots, Timeout: r.config.Timeout, MaxWait: r.config.BatchWait,
		Weight: func(msg Message) int { return len(msg.Body) }, MaxWeight: maxBatchBytes,
	}
	return groupcommit.New(cfg, func(ctx context.Context, msgs []Message) ([]Result, []error) {
		var results []Result
		// Pipelined: BEGIN goes with the key claim and the message insert
		// with COMMIT, three round trips in all (see pgxtx.PipelinedTx).
		err := pgxtx.RunPipelined(ctx, r.config.Pool, func(tx pgx.Tx) error {
			var err error
			results, err = r.ReceiveTx(ctx, tx, msgs)
			return err
		})
		if err != nil {
			return make([]Result, len(msgs)), groupcommit.Fail(len(msgs), err)
		}
		return results, nil
	})
}
