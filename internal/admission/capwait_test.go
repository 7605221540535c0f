package admission

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/outboxtest"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/testdb"
)

// woken reports whether w holds a wake, without taking it.
func woken(w *slotWaiter) bool { return len(w.woken) == 1 }

// TestSlotWaitersWakeOneInTurn: a slot given back wakes one waiter, the
// longest waiting without a wake (every waiter at once made each freed
// slot cost a statement per waiter, found by review); a wake its waiter
// leaves without taking goes to the next; no more than the limit wait.
func TestSlotWaitersWakeOneInTurn(t *testing.T) {
	t.Parallel()
	var s slotWaiters
	ep := uuid.New()
	w1, w2, w3 := s.join(ep, 3), s.join(ep, 3), s.join(ep, 3)
	require.Nil(t, s.join(ep, 3), "a fourth waits no more than the limit allows")
	s.given(ep)
	require.True(t, woken(w1))
	require.False(t, woken(w2) || woken(w3), "one slot, one wake")
	s.given(ep)
	require.True(t, woken(w2))
	require.False(t, woken(w3))
	s.leave(ep, w1) // gone without taking its wake: w3 gets it
	require.True(t, woken(w3))
	s.given(uuid.New()) // another endpoint's slot wakes none of these
	s.leave(ep, w2)
	s.leave(ep, w3)
	require.Empty(t, s.byEndpoint, "nothing kept for an endpoint nobody waits for")
}

// TestAdmitAtCapWaitsForTheSlotGivenBack: a delivery finding its endpoint
// at its cap takes the slot an attempt of this node gives back while it
// waits, instead of being snoozed; a wait whose job ends (the client
// stopping) ends at once, where it went on for capWait (found by review).
func TestAdmitAtCapWaitsForTheSlotGivenBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	eps, ids := outboxtest.Seed(t, pool, []int32{1}, 3)
	g := New(pool, &Config{BusyRetryDelay: time.Minute})
	// Long enough that a slot given back on a loaded machine (make test
	// runs every package at once) still reaches the waiter; the wait the
	// job's end cuts short must end far sooner (below).
	g.capWait = 10 * time.Second
	delivery := func(i int) *outboxtype.Delivery {
		return &outboxtype.Delivery{ID: ids[i], EndpointID: eps[0], MaxInFlight: 1}
	}
	req := Request{Hold: 10 * time.Second}
	first, err := g.Admit(ctx, delivery(0), req)
	require.NoError(t, err)
	require.NotEqual(t, int32(NoSlot), first.Slot())

	type admitted struct {
		t   *Ticket
		err error
	}
	done := make(chan admitted, 1)
	go func() {
		tk, err := g.Admit(ctx, delivery(1), req)
		done <- admitted{tk, err}
	}()
	require.Eventually(t, func() bool {
		g.freed.mu.Lock()
		defer g.freed.mu.Unlock()
		return len(g.freed.byEndpoint[eps[0]]) == 1
	}, 5*time.Second, time.Millisecond, "the second delivery waits at the cap")
	first.Release()
	got := <-done
	require.NoError(t, got.err, "admitted, not deferred")
	require.NotEqual(t, int32(NoSlot), got.t.Slot())

	// The third finds the cap full; its job ends while it waits.
	jobCtx, cancel := context.WithCancel(ctx)
	cancelled := make(chan time.Time, 1)
	go func() {
		for {
			g.freed.mu.Lock()
			waiting := len(g.freed.byEndpoint[eps[0]])
			g.freed.mu.Unlock()
			if waiting == 1 {
				break
			}
			time.Sleep(time.Millisecond) // until the third waits
		}
		cancel()
		cancelled <- time.Now()
	}()
	_, err = g.Admit(jobCtx, delivery(2), req)
	var d *Deferral
	require.True(t, errors.As(err, &d), "deferred: %v", err)
	require.Less(t, time.Since(<-cancelled), time.Second, "the wait ended with the job, not at its deadline")
	got.t.Release()
}
