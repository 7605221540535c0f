package chaos

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testdb"
)

// form is the size of a chaos run and the faults it injects.
type form struct {
	name    string
	events  int // distinct events
	copies  int // deliveries of each, sent concurrently
	senders int
	// River timing of the nodes: a killed node's jobs are retried once
	// older than rescueAfter, by the leader's rescuer (run when a node
	// becomes leader, then every 30 s).
	jobTimeout, rescueAfter time.Duration
	// jobsInterval is the period of Wharf's periodic jobs (1h: none
	// within a short run, so only run-on-start runs are seen).
	jobsInterval time.Duration
	faults       []fault
	pgRestart    bool // restart a private Postgres cluster (long form)
	// poolConns is each node's pool size. Defaults to 8: three nodes on a
	// server shared with other tests (the example's own default is 16).
	poolConns int
	// pgbouncer puts the nodes behind PgBouncer in transaction mode (pgx's
	// exec mode) instead of the cutting proxy; migrations go direct.
	pgbouncer bool
}

// fault is one action, taken when the storm has handed out the fraction
// `at` of its deliveries; the rest are sent while it is under way.
type fault struct {
	at   float64
	kind string // kill, restart, start (a killed node again: not a fault), cut, pgrestart
	node int
	cut  time.Duration
}

func shortForm() form {
	return form{
		name: "short", events: 300, copies: 3, senders: 16,
		jobTimeout: 5 * time.Second, rescueAfter: 6 * time.Second, jobsInterval: time.Hour,
		faults: []fault{
			{at: 0.25, kind: "kill", node: 0}, // node 0 is the leader: its death also tests failover
			{at: 0.45, kind: "restart", node: 1},
			{at: 0.65, kind: "cut", cut: 3 * time.Second},
		},
	}
}

func longForm() form {
	return form{
		name: "long", events: 12000, copies: 3, senders: 32,
		jobTimeout: 5 * time.Second, rescueAfter: 6 * time.Second, jobsInterval: time.Minute,
		faults: []fault{
			{at: 0.10, kind: "kill", node: 0},
			{at: 0.18, kind: "restart", node: 1},
			{at: 0.25, kind: "start", node: 0},
			{at: 0.32, kind: "kill", node: 2},
			{at: 0.40, kind: "cut", cut: 5 * time.Second},
			{at: 0.48, kind: "start", node: 2},
			{at: 0.55, kind: "restart", node: 0},
			{at: 0.62, kind: "pgrestart"},
			{at: 0.70, kind: "kill", node: 1},
			{at: 0.78, kind: "cut", cut: 2 * time.Second},
			{at: 0.85, kind: "start", node: 1},
			{at: 0.90, kind: "restart", node: 2},
		},
		pgRestart: true,
	}
}

// TestChaos: three example nodes, one database, a storm of duplicated
// signed events, nodes killed and restarted and the database cut
// mid-storm. Every acknowledged event must be applied exactly once, and
// periodic jobs must not run once per node. WHARF_CHAOS=long runs the long
// form; WHARF_CHAOS_SOAK adds a soak (see the package comment).
func TestChaos(t *testing.T) {
	t.Parallel()
	f := shortForm()
	if os.Getenv("WHARF_CHAOS") == "long" {
		f = longForm()
	}
	runChaos(t, f)
	if d := os.Getenv("WHARF_CHAOS_SOAK"); d != "" {
		soak, err := time.ParseDuration(d)
		require.NoError(t, err, "WHARF_CHAOS_SOAK")
		runSoak(t, soak)
	}
}

// cluster is three nodes behind one proxy to one database.
type cluster struct {
	nodes  []*node
	proxy  *testdb.Proxy
	direct *pgxpool.Pool // the test's own connection, never cut
	pg     *pgCluster    // a private server, when the form restarts Postgres
	note   string        // how the database was provided, for the summary
}

// newCluster creates the nodes (not started) on a fresh database.
func newCluster(t testing.TB, f form, extraEnv func(i int) []string) *cluster {
	c := &cluster{note: "shared"}
	var dbURL string
	if f.pgRestart {
		pg, why := startPrivateCluster(t)
		if pg != nil {
			c.pg = pg
			dbURL = pg.newDatabase(t)
			c.note = "private"
		} else {
			c.note = "shared(" + why + ")"
			t.Logf("chaos: no private Postgres to restart (%s): the proxy cuts connections instead", why)
		}
	}
	if dbURL == "" {
		dbURL = testdb.NewURL(t)
	}
	proxy, proxied := testdb.NewProxy(t, dbURL)
	c.proxy = proxy
	direct, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(direct.Close)
	c.direct = direct

	base := proxied
	if f.pgbouncer {
		base = testdb.NewPgBouncer(t, dbURL).URL("exec")
	}
	u, err := url.Parse(base)
	require.NoError(t, err)
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(cmp.Or(f.poolConns, 8)))
	u.RawQuery = q.Encode()
	for i := range 3 {
		env := []string{
			"WHARF_EXAMPLE_SECRET=" + chaosSecret,
			"WHARF_EXAMPLE_JOB_TIMEOUT=" + f.jobTimeout.String(),
			"WHARF_EXAMPLE_RESCUE_AFTER=" + f.rescueAfter.String(),
			"WHARF_EXAMPLE_JOBS_INTERVAL=" + f.jobsInterval.String(),
		}
		if f.pgbouncer {
			env = append(env, "WHARF_EXAMPLE_MIGRATE_URL="+dbURL)
		}
		if extraEnv != nil {
			env = append(env, extraEnv(i)...)
		}
		c.nodes = append(c.nodes, newNode(t, fmt.Sprintf("node%d", i), u.String(), env...))
	}
	return c
}

// startAll starts node 0 alone, waits until it leads, then the others:
// node 0 is the leader the storm kills first.
func (c *cluster) startAll(t testing.TB, leaders *leaderWatch) string {
	t.Helper()
	c.nodes[0].start(t)
	deadline := time.Now().Add(30 * time.Second)
	for len(leaders.snapshot()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("node0 was not elected leader within 30s")
		}
		time.Sleep(50 * time.Millisecond) // polling the leader watch
	}
	first := leaderOf(leaders.snapshot()[0])
	for _, n := range c.nodes[1:] {
		n.start(t)
	}
	return first
}

// skews are the nodes' clock skews: none, a realistic two minutes behind,
// and a day ahead, so that copies of one event land in different daily
// partitions (a retry across midnight) and must still be duplicates.
var skews = []string{"0s", "-2m", "24h"}

func runChaos(t testing.TB, f form) {
	start := time.Now()
	c := newCluster(t, f, func(i int) []string { return []string{"WHARF_EXAMPLE_CLOCK_SKEW=" + skews[i]} })
	leaders := watchLeaders(t, c.direct)
	firstLeader := c.startAll(t, leaders)

	events := make([]event, f.events)
	for i := range events {
		events[i] = newEvent(f.name, i)
	}
	s := newSender(c.nodes)
	total := f.events * f.copies
	gates := make([]*gate, len(f.faults))
	for i, ft := range f.faults {
		gates[i] = newGate(int(ft.at * float64(total)))
	}
	stormDone := make(chan struct{})
	t.Cleanup(func() { s.halt(); <-stormDone })
	go func() {
		defer close(stormDone)
		s.storm(events, f.copies, f.senders, time.Now().Add(5*time.Minute), gates)
	}()

	faults := map[string]int{}
	restartAcks := map[int]int{} // a restarted node's 200s before its restart
	var windows []string
	for i, ft := range f.faults {
		g := gates[i]
		<-g.reached
		n := c.nodes[ft.node]
		switch ft.kind {
		case "kill":
			n.kill(t)
			close(g.release)
			faults["kill"]++
		case "restart":
			n.kill(t)
			close(g.release)
			n.start(t)
			restartAcks[ft.node] = s.acks(ft.node)
			faults["restart"]++
		case "start":
			close(g.release)
			n.start(t)
		case "cut", "pgrestart":
			s.openWindow()
			if ft.kind == "pgrestart" && c.pg != nil {
				close(g.release)
				c.pg.restart(t)
				faults["pgrestart"]++
			} else {
				c.proxy.SetDown(true)
				close(g.release)
				time.Sleep(cmp.Or(ft.cut, 3*time.Second)) // the length of the outage
				c.proxy.SetDown(false)
				faults["cut"]++
			}
			w := s.closeWindow()
			windows = append(windows, formatStatuses(w.statuses, w.transport))
			require.Positive(t, w.statuses[503], "%s: no 503 while the database was unreachable (answers %s)", ft.kind, formatStatuses(w.statuses, w.transport))
		default:
			t.Fatalf("unknown fault %q", ft.kind)
		}
	}
	<-stormDone
	stormTime := time.Since(start)

	s.mu.Lock()
	unexpected := append([]string(nil), s.unexpected...)
	s.mu.Unlock()
	require.Empty(t, unexpected, "answers other than 200 (with the event's id) and 503")
	for i, before := range restartAcks {
		require.Greater(t, s.acks(i), before, "%s acknowledged nothing after its restart", c.nodes[i].name)
	}

	// A killed leader's successor must be elected; then every killed
	// node's jobs are rescued and every event settles.
	leaders.awaitLeaderOtherThan(t, firstLeader, 2*time.Minute)
	awaitSettled(t, c.direct, 3*time.Minute)
	// A leader runs the periodic jobs once on start, after River's
	// staggered start (up to a second): a leader killed before then leaves
	// them to its successor, which may just have been elected.
	awaitPeriodic(t, c.direct, time.Minute)
	for _, n := range c.nodes {
		n.stop(t)
	}
	leaders.close()
	elapsed := time.Since(start)

	tl := countEffects(t, c.direct, events, s)
	terms := len(leaders.snapshot())
	periodic := countPeriodic(t, c.direct)
	days := messageDays(t, c.direct)
	var rerun int
	require.NoError(t, c.direct.QueryRow(context.Background(),
		`SELECT count(*) FROM river_job WHERE queue = $1 AND attempt > 1`, inbox.DefaultQueue).Scan(&rerun))

	fmt.Printf("CHAOS form=%s nodes=%d db=%s sent=%d copies=%d requests=%d acknowledged=%d processed=%d doubled=%d lost=%d "+
		"answers=%s outage_answers=%s leader_terms=%d periodic=%s rerun_jobs=%d message_days=%d faults=%s storm=%.1fs elapsed=%.1fs\n",
		f.name, len(c.nodes), c.note, tl.sent, f.copies, s.requests.Load(), tl.acknowledged, tl.processed, tl.doubled, tl.lost,
		s.statusSummary(), strings.Join(windows, "/"), terms, periodic, rerun, days, formatFaults(faults),
		stormTime.Seconds(), elapsed.Seconds())
	tl.require(t)
	periodic.require(t, terms, elapsed, f.jobsInterval)
	require.GreaterOrEqual(t, days, 2, "node2's clock is a day ahead: events it received first are stored under tomorrow")
}

func formatFaults(faults map[string]int) string {
	var parts []string
	for _, k := range []string{"kill", "restart", "cut", "pgrestart"} {
		if faults[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", k, faults[k]))
		}
	}
	return strings.Join(parts, ",")
}
