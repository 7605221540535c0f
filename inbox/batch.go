package inbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/pgxtx"
)

// receiveBatcher gathers concurrent HTTP deliveries into one receive
// transaction (group commit). There is no background goroutine: the first
// delivery of a batch leads it. While other batches are committing it
// waits for others to join, until those commits end, the batch is full or
// maxWait has passed, whichever comes first; then for one of a few commit
// slots, the batch still growing meanwhile (the busier the database, the
// larger the batches); then it closes the batch to newcomers (who start the
// next one), commits it and wakes the followers, each of which answers its
// own request from its own result. So batches commit one after the other
// while commits are quick, and side by side when one takes longer than
// maxWait (a lock wait, say, which then holds up no one else).
type receiveBatcher struct {
	ib      *Inbox
	maxSize int
	maxWait time.Duration
	slots   chan struct{} // one per batch allowed to commit at once

	mu         sync.Mutex
	open       *receiveBatch // taking members; nil when none is
	committing int           // batches holding a slot
	idle       chan struct{} // closed when committing drops to zero; nil while it is zero
}

// maxBatchBytes closes a receive batch to bodies that would take it past
// this size.
const maxBatchBytes = 64 << 20

type receiveBatch struct {
	msgs  []Incoming
	bytes int           // of the bodies
	full  chan struct{} // closed when the batch reaches maxSize
	done  chan struct{} // closed when results and err are set

	results []Result
	err     error
}

// receive stores msg in the next batch's transaction and returns its result
// once that transaction committed. An error means the whole batch failed
// and nothing of it was written.
func (b *receiveBatcher) receive(ctx context.Context, msg Incoming) (Result, error) {
	b.mu.Lock()
	batch, lead := b.open, false
	if batch != nil && batch.bytes+len(msg.Body) > maxBatchBytes {
		// Bodies travel in one parameter, which Postgres caps at 1 GB.
		b.open = nil
		close(batch.full)
		batch = nil
	}
	if batch == nil {
		batch = &receiveBatch{full: make(chan struct{}), done: make(chan struct{})}
		b.open, lead = batch, true
	}
	index := len(batch.msgs)
	batch.msgs = append(batch.msgs, msg)
	batch.bytes += len(msg.Body)
	if len(batch.msgs) >= b.maxSize {
		b.open = nil
		close(batch.full)
	}
	b.mu.Unlock()

	if lead {
		b.lead(ctx, batch)
	} else {
		<-batch.done // the leader never abandons its batch
	}
	if batch.err != nil {
		return Result{}, batch.err
	}
	return batch.results[index], nil
}

// lead gathers followers into batch, then commits it.
func (b *receiveBatcher) lead(ctx context.Context, batch *receiveBatch) {
	defer close(batch.done)
	b.mu.Lock()
	idle := b.idle
	b.mu.Unlock()
	if b.maxWait > 0 && idle != nil {
		timer := time.NewTimer(b.maxWait)
		select {
		case <-batch.full:
		case <-idle:
		case <-timer.C:
		}
		timer.Stop()
	}
	// The batch is everyone's: the leader's client going away must not
	// fail the others, so only the receive timeout bounds it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.ib.receiveTimeout)
	defer cancel()
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		b.closeBatch(batch)
		batch.err = fmt.Errorf("inbox: no receive slot within the receive timeout: %w", ctx.Err())
		return
	}
	b.mu.Lock()
	if b.committing == 0 {
		b.idle = make(chan struct{})
	}
	b.committing++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.committing--
		if b.committing == 0 {
			close(b.idle)
			b.idle = nil
		}
		b.mu.Unlock()
		<-b.slots
	}()
	b.closeBatch(batch)
	defer func() {
		if r := recover(); r != nil {
			batch.results, batch.err = nil, fmt.Errorf("inbox: receive batch panicked: %v", r)
		}
	}()
	// Pipelined: BEGIN goes with the key claim and the message insert with
	// COMMIT, three round trips in all (see pgxtx.PipelinedTx).
	batch.err = pgxtx.RunPipelined(ctx, b.ib.pool, func(tx pgx.Tx) error {
		var err error
		batch.results, err = b.ib.ReceiveManyTx(ctx, tx, batch.msgs)
		return err
	})
	if batch.err != nil {
		batch.results = nil
	}
}

// closeBatch stops batch from taking members, if it still does.
func (b *receiveBatcher) closeBatch(batch *receiveBatch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open == batch {
		b.open = nil
	}
}
