// Package loadtest drives concurrent load for Wharf's benchmarks and
// summarises latencies. It is imported by tests only.
package loadtest

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Result is what one load run measured.
type Result struct {
	// Latencies holds each operation's latency, by operation index.
	Latencies []time.Duration
	// Wall is the run's elapsed time.
	Wall time.Duration
}

// Rate returns operations per second.
func (r Result) Rate() float64 { return float64(len(r.Latencies)) / r.Wall.Seconds() }

// Percentile returns the p-th percentile latency (0 < p ≤ 100).
func (r Result) Percentile(p float64) time.Duration {
	s := slices.Clone(r.Latencies)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p/100))]
}

// Run calls op for i in [0, n) from workers goroutines and returns each
// call's latency and the wall time, or the first error.
func Run(workers, n int, op func(i int) error) (Result, error) {
	res := Result{Latencies: make([]time.Duration, n)}
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || firstErr.Load() != nil {
					return
				}
				t0 := time.Now()
				if err := op(i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				res.Latencies[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	res.Wall = time.Since(start)
	if err, ok := firstErr.Load().(error); ok {
		return res, err
	}
	return res, nil
}

// Ms converts a duration to fractional milliseconds, for reports.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// RunRate starts op for i in [0, n) at a fixed rate (an open loop: a slow
// operation does not delay the next one's start), and returns each call's
// latency and the wall time, or the first error. Latency under a fixed
// offered load shows interference that a saturating closed loop hides in
// its queueing.
func RunRate(perSecond float64, n int, op func(i int) error) (Result, error) {
	res := Result{Latencies: make([]time.Duration, n)}
	var firstErr atomic.Value
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / perSecond)
	start := time.Now()
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			if err := op(i); err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			res.Latencies[i] = time.Since(t0)
		}()
	}
	wg.Wait()
	res.Wall = time.Since(start)
	if err, ok := firstErr.Load().(error); ok {
		return res, err
	}
	return res, nil
}
