package process

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGateRunsACallThatCannotMergeAtOnce: a job that may not merge (an
// ordered message's, a retry's, any job while handlers are slow) takes a
// free slot at once, though another transaction runs: no call can join its
// batch (its weight fills it), so it waits for none (it once waited
// mergeMaxWait, 1 ms, for nothing).
func TestGateRunsACallThatCannotMergeAtOnce(t *testing.T) {
	p := &Processor{}
	gate := p.newGate(4, 10)
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = gate.Do(ctx, gateCall{ctx: ctx, run: func(context.Context) error { close(started); <-release; return nil }})
	}()
	<-started // one transaction runs; three slots are free
	var waits []time.Duration
	for range 21 {
		at := time.Now()
		var ran time.Time
		_, err := gate.Do(ctx, gateCall{ctx: ctx, run: func(context.Context) error { ran = time.Now(); return nil }})
		require.NoError(t, err)
		waits = append(waits, ran.Sub(at))
	}
	close(release)
	wg.Wait()
	slices.Sort(waits)
	median := waits[len(waits)/2]
	t.Logf("median wait for a free slot: %s", median)
	require.Less(t, median, 300*time.Microsecond, "a lone call that cannot merge waited for a free slot")
}
