// Package loadtest drives concurrent load for Wharf's benchmarks and
// summarises latencies. It is imported by tests only.
package loadtest

import (
	"fmt"
	"os"
	"slices"
	"strconv"
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

// run times op(i) for every i that start hands it, and collects the
// latencies and the first error. start calls launch for each index, in
// whatever goroutines and at whatever pace it likes, and returns once all
// are launched. A latency runs from the time launch is given as the call's
// scheduled start (zero: when launch is called), so that an open loop that
// falls behind its schedule counts the delay (no coordinated omission).
func run(n int, start func(launch func(i int, scheduled time.Time) bool), op func(i int) error) (Result, error) {
	res := Result{Latencies: make([]time.Duration, n)}
	var firstErr atomic.Value
	var wg sync.WaitGroup
	t0 := time.Now()
	start(func(i int, began time.Time) bool {
		if firstErr.Load() != nil {
			return false
		}
		wg.Add(1)
		defer wg.Done()
		if began.IsZero() {
			began = time.Now()
		}
		if err := op(i); err != nil {
			firstErr.CompareAndSwap(nil, err)
			return false
		}
		res.Latencies[i] = time.Since(began)
		return true
	})
	wg.Wait()
	res.Wall = time.Since(t0)
	if err, ok := firstErr.Load().(error); ok {
		return res, err
	}
	return res, nil
}

// Run calls op for i in [0, n) from workers goroutines (a closed loop:
// each starts its next call when the last returns) and returns each call's
// latency and the wall time, or the first error.
func Run(workers, n int, op func(i int) error) (Result, error) {
	return run(n, func(launch func(int, time.Time) bool) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1) - 1); i < n && launch(i, time.Time{}); i = int(next.Add(1) - 1) {
				}
			}()
		}
		wg.Wait()
	}, op)
}

// RunRate starts op for i in [0, n) at a fixed rate (an open loop: a slow
// operation does not delay the next one's start), and returns each call's
// latency, measured from its scheduled start, and the wall time, or the
// first error. Latency under a fixed
// offered load shows interference that a saturating closed loop hides in
// its queueing.
func RunRate(perSecond float64, n int, op func(i int) error) (Result, error) {
	return RunSchedule(perSecond, n, func(i int, _ time.Time) error { return op(i) })
}

// RunSchedule is RunRate whose op is given its call's scheduled start, for
// a latency that ends elsewhere (a webhook's arrival at a receiver, a
// handler's run) and must be measured from the same start.
func RunSchedule(perSecond float64, n int, op func(i int, scheduled time.Time) error) (Result, error) {
	interval := time.Duration(float64(time.Second) / perSecond)
	scheduledAt := func(start time.Time, i int) time.Time { return start.Add(time.Duration(i) * interval) }
	var start time.Time
	return run(n, func(launch func(int, time.Time) bool) {
		var wg sync.WaitGroup
		start = time.Now()
		for i := range n {
			scheduled := scheduledAt(start, i)
			if wait := time.Until(scheduled); wait > 0 {
				time.Sleep(wait) // pacing the offered load is the point here
			}
			wg.Add(1)
			go func() { defer wg.Done(); launch(i, scheduled) }()
		}
		wg.Wait()
	}, func(i int) error { return op(i, scheduledAt(start, i)) })
}

// Ms converts a duration to fractional milliseconds, for reports.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// EnvInt returns the positive integer in the environment variable name, or
// def when it is unset or not one.
func EnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// EnvFloat returns the positive number in the environment variable name,
// or def when it is unset or not one.
func EnvFloat(name string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil && v > 0 {
		return v
	}
	return def
}

// Bench prints a summary line that make bench collects at its end:
// "BENCH <name> <ratio> <wharf figure> <baseline figure>", the ratio being
// wharf/baseline (higher is better for rates; for latencies the name says
// which way). Units belong in the name.
func Bench(name string, wharf, baseline float64) {
	ratio := 0.0
	if baseline != 0 {
		ratio = wharf / baseline
	}
	fmt.Printf("BENCH %s %.3f %.2f %.2f\n", name, ratio, wharf, baseline)
}

// The River config of every River peer in the benchmarks (a no-op job, a
// plain sender, a River-only receiver) and of Wharf's runs beside them:
// tuned as a competent user tunes River for throughput. River's defaults
// (100 workers a queue but a 100 ms fetch cooldown) cap a queue at
// MaxWorkers jobs per cooldown; with these it ran ~16,000 no-op jobs/s on
// the 2-core machine of docs/performance.md.
const (
	RiverWorkers           = 100
	RiverFetchCooldown     = 5 * time.Millisecond
	RiverFetchPollInterval = 20 * time.Millisecond
)

// The latency targets of publish to arrival and receive to handler, with
// the default wiring, at 50 and 200 per second (docs/performance.md).
const (
	LatencyTargetP50 = 10 * time.Millisecond
	LatencyTargetP99 = 25 * time.Millisecond
)

// AwaitLatencies polls collect, which returns the latencies measured so
// far, until it returns n of them, and returns them sorted; an error when
// fewer than n came within timeout. For latencies that end elsewhere (a
// webhook's arrival, a handler's start), measured from RunSchedule's
// scheduled starts.
func AwaitLatencies(n int, timeout time.Duration, collect func() []time.Duration) ([]time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for {
		got := collect()
		if len(got) >= n {
			slices.Sort(got)
			return got, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d arrived within %s", len(got), n, timeout)
		}
		time.Sleep(20 * time.Millisecond) // polling for the last arrivals
	}
}

// ReportLatencies logs sorted's p50, p99 and maximum under what and prints
// their BENCH lines against the targets, named prefix_p50_ms_… and
// prefix_p99_ms_….
func ReportLatencies(tb Logger, prefix, what string, sorted []time.Duration) {
	tb.Helper()
	n := len(sorted)
	p50, p99, most := sorted[n/2], sorted[n*99/100], sorted[n-1]
	tb.Logf("%s: p50 %.1f ms, p99 %.1f ms, max %.1f ms", what, Ms(p50), Ms(p99), Ms(most))
	Bench(prefix+"_p50_ms_vs_target_lower_is_better", Ms(p50), Ms(LatencyTargetP50))
	Bench(prefix+"_p99_ms_vs_target_lower_is_better", Ms(p99), Ms(LatencyTargetP99))
}
