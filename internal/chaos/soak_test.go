package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runSoak sends distinct events (every tenth twice) at a fixed rate to
// three nodes for d, with Wharf's periodic jobs running every minute and
// the nodes' clocks crossing midnight a third of the way in, sampling each
// node's RSS, threads and open files. Afterwards every event must have been
// applied exactly once, the last retention run must have deferred no
// partition, and no node may have grown past a generous bound.
func runSoak(t testing.TB, d time.Duration) {
	start := time.Now()
	f := form{name: "soak", jobTimeout: 5 * time.Second, rescueAfter: 6 * time.Second, jobsInterval: time.Minute}
	now := time.Now().UTC()
	midnight := now.Truncate(24 * time.Hour).Add(24 * time.Hour)
	base := midnight.Sub(now) - d/3
	c := newCluster(t, f, func(i int) []string {
		return []string{"WHARF_EXAMPLE_CLOCK_SKEW=" + (base + time.Duration(i)*time.Minute).String()}
	})
	leaders := watchLeaders(t, c.direct)
	c.startAll(t, leaders)
	s := newSender(c.nodes)

	// The maximum: distinct events from 32 senders for 10 s.
	var events []event
	var mu sync.Mutex
	next := func() event {
		mu.Lock()
		defer mu.Unlock()
		ev := newEvent("soak", len(events))
		events = append(events, ev)
		return ev
	}
	warm := time.Now()
	var warmAcked atomic.Int64
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(warm) < 10*time.Second {
				if s.deliver(next(), w, time.Now().Add(time.Minute)) {
					warmAcked.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	maxRate := float64(warmAcked.Load()) / time.Since(warm).Seconds()
	rate := maxRate / 2
	if v := os.Getenv("WHARF_CHAOS_SOAK_RATE"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		require.NoError(t, err, "WHARF_CHAOS_SOAK_RATE")
		rate = r
	}

	// The soak: an open loop at rate, at most 256 deliveries in flight.
	samples := make([][]procSample, len(c.nodes))
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			for i, n := range c.nodes {
				if p, ok := sampleProc(n.pid()); ok {
					samples[i] = append(samples[i], p)
				}
			}
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()
	soakStart := time.Now()
	inFlight := make(chan struct{}, 256)
	var launched int
	tick := time.NewTicker(10 * time.Millisecond)
	for time.Since(soakStart) < d {
		<-tick.C
		due := int(rate * time.Since(soakStart).Seconds())
		for ; launched < due; launched++ {
			inFlight <- struct{}{}
			wg.Add(1)
			ev := next()
			go func(i int) {
				defer wg.Done()
				defer func() { <-inFlight }()
				s.deliver(ev, i, time.Now().Add(2*time.Minute))
				if i%10 == 0 {
					s.deliver(ev, i+1, time.Now().Add(2*time.Minute))
				}
			}(launched)
		}
	}
	tick.Stop()
	wg.Wait()
	achieved := float64(launched) / time.Since(soakStart).Seconds()
	close(stopSampling)
	<-sampled

	awaitSettled(t, c.direct, 5*time.Minute)
	for _, n := range c.nodes {
		n.stop(t)
	}
	leaders.close()
	tl := countEffects(t, c.direct, events, s)
	elapsed := time.Since(start)
	terms := len(leaders.snapshot())
	periodic := countPeriodic(t, c.direct)
	days := messageDays(t, c.direct)
	var deferred json.RawMessage
	require.NoError(t, c.direct.QueryRow(context.Background(), `SELECT coalesce(metadata->'output'->'deferred', 'null')
		FROM river_job WHERE kind = 'wharf_prune' AND state = 'completed' ORDER BY id DESC LIMIT 1`).Scan(&deferred))
	var growth []string
	var grew []string
	for i, ss := range samples {
		g := growthOf(ss)
		growth = append(growth, fmt.Sprintf("%s:rss_kb=%d->%d,threads=%d->%d,fds=%d->%d",
			c.nodes[i].name, g.first.rssKB, g.last.rssKB, g.first.threads, g.last.threads, g.first.fds, g.last.fds))
		if g.last.rssKB > 2*g.first.rssKB+50_000 || g.last.threads > 2*g.first.threads+20 || g.last.fds > 2*g.first.fds+50 {
			grew = append(grew, c.nodes[i].name)
		}
	}
	fmt.Printf("CHAOS form=soak nodes=%d duration=%s max_rate=%.0f/s rate=%.0f/s achieved=%.0f/s sent=%d requests=%d acknowledged=%d processed=%d doubled=%d lost=%d "+
		"answers=%s leader_terms=%d periodic=%s last_prune_deferred=%s message_days=%d growth=%v faults=midnight:1\n",
		len(c.nodes), d, maxRate, rate, achieved, tl.sent, s.requests.Load(), tl.acknowledged, tl.processed, tl.doubled, tl.lost,
		s.statusSummary(), terms, periodic, deferred, days, growth)
	tl.require(t)
	periodic.require(t, terms, elapsed, f.jobsInterval)
	require.GreaterOrEqual(t, days, 2, "the nodes' clocks crossed midnight during the soak")
	require.JSONEq(t, `[]`, string(deferred), "the last retention run deferred partitions")
	require.Empty(t, grew, "nodes whose RSS, threads or open files more than doubled during the soak: %v", growth)
}

// growth compares the median sample of the first quarter of a soak (after
// its first sample, taken before any load) with that of the last quarter.
type growth struct{ first, last procSample }

func growthOf(ss []procSample) growth {
	if len(ss) > 1 {
		ss = ss[1:]
	}
	if len(ss) == 0 {
		return growth{}
	}
	q := max(1, len(ss)/4)
	return growth{first: median(ss[:q]), last: median(ss[len(ss)-q:])}
}

func median(ss []procSample) procSample {
	pick := func(f func(procSample) int) int {
		v := make([]int, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return procSample{
		rssKB:   pick(func(s procSample) int { return s.rssKB }),
		threads: pick(func(s procSample) int { return s.threads }),
		fds:     pick(func(s procSample) int { return s.fds }),
	}
}
