package shared

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Combiner runs the concurrent calls of one statement together: callers
// that arrive while earlier batches are in the database join the next
// batch, which then runs as one statement or one pipelined transaction
// (group commit). It has no background goroutine and adds no wait: the
// first caller of a batch leads it, and a batch closes when one of the
// Combiner's slots is free (or it is full), so a lone call runs at once,
// and the busier the database, the larger the batches.
//
// A batch runs on a context of its own (the leader's values, without its
// cancellation, bounded by the Combiner's timeout from when it starts; its
// wait for a slot is bounded by the timeout too): one caller going away
// must not fail the others. A caller waits for its batch whatever happens
// to its own context, as a statement it joined may be committing its work.
type Combiner[In, Out any] struct {
	run     func(ctx context.Context, ins []In) ([]Out, []error)
	maxSize int
	timeout time.Duration
	slots   chan struct{}

	mu   sync.Mutex
	open *combined[In, Out]
}

type combined[In, Out any] struct {
	ins  []In
	full chan struct{} // closed when the batch reaches maxSize
	done chan struct{} // closed when outs and errs are set
	outs []Out
	errs []error
}

// NewCombiner returns a Combiner whose batches run run with at most maxSize
// inputs, at most slots of them at once, each within timeout. run returns
// one output and one error (nil: success) for each input, in order; it
// may return a nil error slice when every input succeeded.
func NewCombiner[In, Out any](maxSize, slots int, timeout time.Duration,
	run func(ctx context.Context, ins []In) ([]Out, []error),
) *Combiner[In, Out] {
	return &Combiner[In, Out]{
		run:     run,
		maxSize: max(maxSize, 1),
		timeout: timeout,
		slots:   make(chan struct{}, max(slots, 1)),
	}
}

// Do runs in in the next batch and returns its output.
func (c *Combiner[In, Out]) Do(ctx context.Context, in In) (Out, error) {
	c.mu.Lock()
	batch, lead := c.open, false
	if batch == nil {
		batch = &combined[In, Out]{full: make(chan struct{}), done: make(chan struct{})}
		c.open, lead = batch, true
	}
	index := len(batch.ins)
	batch.ins = append(batch.ins, in)
	if len(batch.ins) >= c.maxSize {
		c.open = nil
		close(batch.full)
	}
	c.mu.Unlock()

	if lead {
		c.lead(ctx, batch)
	} else {
		<-batch.done // the leader never abandons its batch
	}
	var err error
	if batch.errs != nil {
		err = batch.errs[index]
	}
	if err != nil {
		var zero Out
		return zero, err
	}
	return batch.outs[index], nil
}

// lead waits for a slot, the batch growing meanwhile, then closes and runs
// it.
func (c *Combiner[In, Out]) lead(ctx context.Context, batch *combined[In, Out]) {
	defer close(batch.done)
	ctx = context.WithoutCancel(ctx)
	wait := time.NewTimer(c.timeout)
	select {
	case c.slots <- struct{}{}:
		wait.Stop()
	case <-wait.C:
		c.closeBatch(batch)
		batch.fail(fmt.Errorf("no database slot within %s: %w", c.timeout, context.DeadlineExceeded))
		return
	}
	defer func() { <-c.slots }()
	c.closeBatch(batch)
	// The batch's own time starts once it runs.
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			batch.fail(fmt.Errorf("combined statement panicked: %v", r))
		}
	}()
	outs, errs := c.run(ctx, batch.ins)
	if len(outs) != len(batch.ins) || (errs != nil && len(errs) != len(batch.ins)) {
		batch.fail(fmt.Errorf("combined statement: %d results for %d calls", len(outs), len(batch.ins)))
		return
	}
	batch.outs, batch.errs = outs, errs
}

// closeBatch stops batch from taking members, if it still does.
func (c *Combiner[In, Out]) closeBatch(batch *combined[In, Out]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open == batch {
		c.open = nil
	}
}

// fail gives every member of the batch err.
func (b *combined[In, Out]) fail(err error) {
	b.outs = make([]Out, len(b.ins))
	b.errs = make([]error, len(b.ins))
	for i := range b.errs {
		b.errs[i] = err
	}
}

// Fail returns n copies of err: the errors of a batch that failed as a
// whole.
func Fail(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// KeyedCombiner is a Combiner per key: calls of one key are combined, and
// calls of different keys never share a batch, nor wait for one another's
// slots. A key's Combiner lives while calls of the key are under way.
type KeyedCombiner[K comparable, In, Out any] struct {
	newCombiner func(key K) *Combiner[In, Out]

	mu    sync.Mutex
	byKey map[K]*keyedEntry[In, Out]
}

type keyedEntry[In, Out any] struct {
	c     *Combiner[In, Out]
	calls int
}

// NewKeyedCombiner returns a KeyedCombiner whose batches of key run run(ctx,
// key, ins), with NewCombiner's limits per key.
func NewKeyedCombiner[K comparable, In, Out any](maxSize, slots int, timeout time.Duration,
	run func(ctx context.Context, key K, ins []In) ([]Out, []error),
) *KeyedCombiner[K, In, Out] {
	return &KeyedCombiner[K, In, Out]{
		newCombiner: func(key K) *Combiner[In, Out] {
			return NewCombiner(maxSize, slots, timeout, func(ctx context.Context, ins []In) ([]Out, []error) {
				return run(ctx, key, ins)
			})
		},
		byKey: map[K]*keyedEntry[In, Out]{},
	}
}

// Do runs in in the next batch of key and returns its output.
func (k *KeyedCombiner[K, In, Out]) Do(ctx context.Context, key K, in In) (Out, error) {
	k.mu.Lock()
	e := k.byKey[key]
	if e == nil {
		e = &keyedEntry[In, Out]{c: k.newCombiner(key)}
		k.byKey[key] = e
	}
	e.calls++
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		if e.calls--; e.calls == 0 {
			delete(k.byKey, key)
		}
		k.mu.Unlock()
	}()
	return e.c.Do(ctx, in)
}
