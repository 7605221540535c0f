// Package groupcommit runs concurrent calls of one statement (or one
// transaction) together: the inbox's receive batches and the outbox's
// loads, slot takes and attempt records. Under load this divides the
// database's work per call, and the connections the callers hold, by the
// size of the batches; a lone call runs at once.
package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Config configures a Batcher.
type Config[In any] struct {
	// MaxSize closes a batch once it has this many calls. Defaults to 1.
	MaxSize int
	// Slots is how many batches run at once; a batch waiting for a slot
	// keeps taking calls. Defaults to 1.
	Slots int
	// Timeout bounds a batch from when its leader starts waiting for a
	// slot to when it has run. Required.
	Timeout time.Duration
	// MaxWait is how long a batch waits for more calls to join it while
	// other batches are running. Defaults to 0: a batch waits only for a
	// slot.
	MaxWait time.Duration
	// IdleWait is how long a batch waits for more calls to join it when
	// no other batch is running: for callers that come together (the
	// jobs of one fetch) rather than one after another. Defaults to 0: an
	// idle Batcher runs a batch at once.
	IdleWait time.Duration
	// Weight and MaxWeight close a batch to a call that would take its
	// weight past MaxWeight (the bodies a statement sends in one
	// parameter, say); such a call starts the next batch, and a batch at
	// MaxWeight takes no more. Defaults to none.
	Weight    func(In) int
	MaxWeight int
	// LeaderBoundsWait makes the context of a batch's leader, as it was
	// given to Do (its deadline and cancellation), bound the batch's wait
	// for a slot too, not only Timeout. Defaults to false.
	LeaderBoundsWait bool
}

// ErrNoSlot is the error of every call of a batch that found no slot in
// time (Config.Timeout, or the leader's context with LeaderBoundsWait).
var ErrNoSlot = errors.New("groupcommit: no slot in time")

// Batcher runs the concurrent calls of one statement together: callers
// that arrive while earlier batches are in the database join the next
// batch, which then runs as one statement or one transaction (group
// commit). It has no goroutine of its own: the first caller of a batch
// leads it. A batch closes when a slot is free for it (after MaxWait, when
// other batches are running, or IdleWait when none is) or it is full, so
// the busier the database, the larger the batches.
//
// A batch runs on a context of its own (the leader's values, without its
// cancellation, bounded by Timeout): one caller going away must not fail
// the others. A caller waits for its batch whatever happens to its own
// context, as a statement it joined may be committing its work.
type Batcher[In, Out any] struct {
	run   func(ctx context.Context, ins []In) ([]Out, []error)
	cfg   Config[In]
	slots chan struct{}

	mu      sync.Mutex
	open    *batch[In, Out]
	running int           // batches holding a slot
	idle    chan struct{} // closed when running drops to zero; nil while it is zero
}

type batch[In, Out any] struct {
	ins    []In
	weight int
	full   chan struct{} // closed when the batch stops taking calls for its size
	done   chan struct{} // closed when outs and errs are set
	outs   []Out
	errs   []error
}

// New returns a Batcher whose batches run run. run returns one output and
// one error (nil: success) for each input, in order; it may return a nil
// error slice when every input succeeded, and Fail's errors when the batch
// failed as a whole.
func New[In, Out any](cfg Config[In], run func(ctx context.Context, ins []In) ([]Out, []error)) *Batcher[In, Out] {
	cfg.MaxSize = max(cfg.MaxSize, 1)
	cfg.Slots = max(cfg.Slots, 1)
	return &Batcher[In, Out]{run: run, cfg: cfg, slots: make(chan struct{}, cfg.Slots)}
}

// Do runs in in the next batch and returns its output.
func (b *Batcher[In, Out]) Do(ctx context.Context, in In) (Out, error) {
	bt, index, lead := b.join(in)
	if lead {
		b.lead(ctx, bt)
	} else {
		<-bt.done // the leader never abandons its batch
	}
	var err error
	if bt.errs != nil {
		err = bt.errs[index]
	}
	if err != nil {
		var zero Out
		return zero, err
	}
	return bt.outs[index], nil
}

// join adds in to the open batch, or to a new one that the caller leads.
func (b *Batcher[In, Out]) join(in In) (bt *batch[In, Out], index int, lead bool) {
	weight := 0
	if b.cfg.Weight != nil {
		weight = b.cfg.Weight(in)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	bt = b.open
	if bt != nil && b.cfg.Weight != nil && bt.weight+weight > b.cfg.MaxWeight {
		b.closeLocked(bt)
		bt = nil
	}
	if bt == nil {
		bt = &batch[In, Out]{full: make(chan struct{}), done: make(chan struct{})}
		b.open, lead = bt, true
	}
	index = len(bt.ins)
	bt.ins = append(bt.ins, in)
	bt.weight += weight
	if len(bt.ins) >= b.cfg.MaxSize || (b.cfg.Weight != nil && bt.weight >= b.cfg.MaxWeight) {
		b.closeLocked(bt)
	}
	return bt, index, lead
}

// lead gathers calls into bt while other batches run (up to MaxWait) and
// while it waits for a slot, then closes and runs it.
func (b *Batcher[In, Out]) lead(ctx context.Context, bt *batch[In, Out]) {
	defer close(bt.done)
	b.mu.Lock()
	idle := b.idle
	b.mu.Unlock()
	wait := b.cfg.IdleWait
	if idle != nil {
		wait = b.cfg.MaxWait
	}
	if wait > 0 {
		// idle is nil when no batch runs: its case never fires then.
		timer := time.NewTimer(wait)
		select {
		case <-bt.full:
		case <-idle:
		case <-timer.C:
		}
		timer.Stop()
	}
	caller := ctx
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.Timeout)
	defer cancel()
	var callerDone <-chan struct{}
	if b.cfg.LeaderBoundsWait {
		callerDone = caller.Done()
	}
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		b.close(bt)
		bt.fail(fmt.Errorf("%w (%s): %w", ErrNoSlot, b.cfg.Timeout, ctx.Err()))
		return
	case <-callerDone:
		b.close(bt)
		bt.fail(fmt.Errorf("%w: %w", ErrNoSlot, context.Cause(caller)))
		return
	}
	b.started()
	defer b.finished()
	b.close(bt)
	defer func() {
		if r := recover(); r != nil {
			bt.fail(fmt.Errorf("batch panicked: %v", r))
		}
	}()
	outs, errs := b.run(ctx, bt.ins)
	if len(outs) != len(bt.ins) || (errs != nil && len(errs) != len(bt.ins)) {
		bt.fail(fmt.Errorf("batch: %d results for %d calls", len(outs), len(bt.ins)))
		return
	}
	bt.outs, bt.errs = outs, errs
}

// started counts a batch that took a slot.
func (b *Batcher[In, Out]) started() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running == 0 {
		b.idle = make(chan struct{})
	}
	b.running++
}

// finished gives back the slot of a batch that ran.
func (b *Batcher[In, Out]) finished() {
	b.mu.Lock()
	b.running--
	if b.running == 0 {
		close(b.idle)
		b.idle = nil
	}
	b.mu.Unlock()
	<-b.slots
}

// close stops bt from taking calls, if it still does.
func (b *Batcher[In, Out]) close(bt *batch[In, Out]) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open == bt {
		b.open = nil
	}
}

// closeLocked closes bt, the open batch, for its size; b.mu is held.
func (b *Batcher[In, Out]) closeLocked(bt *batch[In, Out]) {
	b.open = nil
	close(bt.full)
}

// Gathering returns how many calls the open batch (taking calls, not yet
// running) holds.
func (b *Batcher[In, Out]) Gathering() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open == nil {
		return 0
	}
	return len(b.open.ins)
}

// fail gives every call of bt err.
func (bt *batch[In, Out]) fail(err error) {
	bt.outs = make([]Out, len(bt.ins))
	bt.errs = Fail(len(bt.ins), err)
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

// Keyed is a Batcher per key: calls of one key are batched together, and
// calls of different keys never share a batch, nor wait for one another's
// slots. A key's Batcher lives while calls of the key are under way.
type Keyed[K comparable, In, Out any] struct {
	newBatcher func(key K) *Batcher[In, Out]

	mu    sync.Mutex
	byKey map[K]*keyed[In, Out]
}

type keyed[In, Out any] struct {
	b     *Batcher[In, Out]
	calls int
}

// NewKeyed returns a Keyed whose batches of key run run(ctx, key, ins),
// each key's with cfg.
func NewKeyed[K comparable, In, Out any](cfg Config[In], run func(ctx context.Context, key K, ins []In) ([]Out, []error)) *Keyed[K, In, Out] {
	return &Keyed[K, In, Out]{
		newBatcher: func(key K) *Batcher[In, Out] {
			return New(cfg, func(ctx context.Context, ins []In) ([]Out, []error) { return run(ctx, key, ins) })
		},
		byKey: map[K]*keyed[In, Out]{},
	}
}

// Do runs in in the next batch of key and returns its output.
func (k *Keyed[K, In, Out]) Do(ctx context.Context, key K, in In) (Out, error) {
	k.mu.Lock()
	e := k.byKey[key]
	if e == nil {
		e = &keyed[In, Out]{b: k.newBatcher(key)}
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
	return e.b.Do(ctx, in)
}
