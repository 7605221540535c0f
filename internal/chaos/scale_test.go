package chaos

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkScaleOut runs the example app as one process, then as three
// (each with its River workers) against one database, under the same load:
// 32 closed-loop senders of distinct signed events for scaleStorm, spread
// over the running nodes; in the three-node run one node is killed half-way
// and its senders move to the others, as a load balancer would. It reports
// webhooks applied per second while the storm runs (received, processed,
// balance updated), waits until every message is processed, checks that
// every acknowledged event was applied exactly once, then prints
//
//	BENCH scaleout_3_nodes_vs_1 <ratio> <three nodes>/s <one node>/s
//
// On one machine the nodes share its cores with Postgres and the load
// generator, so the ratio says how much a second and third process add
// before the machine (not Wharf) is the limit; docs/scaling.md reads it.
//
// Then three nodes, none killed, behind PgBouncer in transaction mode
// (default_pool_size 20; pgx in exec mode; River polling every 20 ms, as
// LISTEN does not work there) against the same three direct:
//
//	BENCH scaleout_3_nodes_pgbouncer_vs_direct <ratio> <through PgBouncer>/s <direct>/s
func BenchmarkScaleOut(b *testing.B) {
	for range b.N {
		one := measureScale(b, 1, false, false)
		three := measureScale(b, 3, true, false)
		fmt.Printf("SCALE nodes=1 %s\nSCALE nodes=3 %s (one killed half-way)\n", one, three)
		fmt.Printf("BENCH scaleout_3_nodes_vs_1 %.2f %.0f/s %.0f/s\n", three.rate/one.rate, three.rate, one.rate)
		direct := measureScale(b, 3, false, false)
		pooled := measureScale(b, 3, false, true)
		fmt.Printf("SCALE nodes=3 direct %s\nSCALE nodes=3 pgbouncer %s\n", direct, pooled)
		fmt.Printf("BENCH scaleout_3_nodes_pgbouncer_vs_direct %.2f %.0f/s %.0f/s\n", pooled.rate/direct.rate, pooled.rate, direct.rate)
	}
}

const scaleStorm = 15 * time.Second

type scaleResult struct {
	acked, applied int
	rate           float64
	storm, settle  time.Duration
}

func (r scaleResult) String() string {
	return fmt.Sprintf("acknowledged=%d applied_during_storm=%d rate=%.0f/s storm=%.1fs settle=%.1fs doubled=0 lost=0",
		r.acked, r.applied, r.rate, r.storm.Seconds(), r.settle.Seconds())
}

func measureScale(b *testing.B, nodes int, kill, pgbouncer bool) scaleResult {
	f := form{name: fmt.Sprintf("scale%d", nodes), jobTimeout: 5 * time.Second, rescueAfter: 6 * time.Second,
		jobsInterval: time.Hour, poolConns: 16, pgbouncer: pgbouncer}
	c := newCluster(b, f, nil)
	running := c.nodes[:nodes]
	for _, n := range running {
		n.start(b)
	}
	s := newSender(running)

	var mu sync.Mutex
	var events []event
	next := func() event {
		mu.Lock()
		defer mu.Unlock()
		ev := newEvent(f.name, len(events))
		events = append(events, ev)
		return ev
	}
	var acked atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < scaleStorm {
				if s.deliver(next(), w, time.Now().Add(time.Minute)) {
					acked.Add(1)
				}
			}
		}()
	}
	if kill {
		time.Sleep(scaleStorm / 2) // the storm's midpoint
		running[nodes-1].kill(b)
	}
	wg.Wait()
	storm := time.Since(start)
	awaitSettled(b, c.direct, 3*time.Minute)
	elapsed := time.Since(start)
	for _, n := range running {
		n.stop(b)
	}

	tl := countEffects(b, c.direct, events, s)
	tl.require(b)
	// The rate is what was applied while the storm ran: after it, a
	// killed node's last jobs wait for River's rescuer (every 30 s), which
	// says nothing about throughput.
	var applied int
	require.NoError(b, c.direct.QueryRow(context.Background(),
		`SELECT count(*) FROM wharf_inbox_messages WHERE source = 'payments' AND processed_at < $1`,
		start.Add(storm)).Scan(&applied))
	return scaleResult{
		acked: int(acked.Load()), applied: applied, rate: float64(applied) / storm.Seconds(),
		storm: storm, settle: elapsed - storm,
	}
}
