package outbox_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/telemetrytest"
	"github.com/wharfhq/wharf/internal/testproc"
	"github.com/wharfhq/wharf/outbox"
)

// Headers each test node's transport sets on its requests.
const (
	// nodeHeader names the node that sent the request.
	nodeHeader = "X-Test-Node"
	// sentHeader is when the node sent it (Unix nanoseconds): when the
	// outbox handed it to its HTTP transport, its rate limit token due.
	sentHeader = "X-Test-Sent-At"
)

// node is one worker node of a multi-node test: its own pool, outbox and
// River client on the shared database.
type node struct {
	pool   *pgxpool.Pool
	outbox *outbox.Outbox
	client *river.Client[pgx.Tx]
	// transport is the one the outbox's requests go through, under the
	// node's WrapTransport.
	transport http.RoundTripper
}

// startNode starts a worker node on the database at url with cfg (copied),
// whose requests carry nodeHeader (name) and sentHeader.
func startNode(tb testing.TB, url, name string, cfg *outbox.Config) *node {
	tb.Helper()
	return startNodeWith(tb, url, name, cfg, nil)
}

// startNodeWith is startNode with tune, when not nil, changing the River
// config of the node's client.
func startNodeWith(tb testing.TB, url, name string, cfg *outbox.Config, tune func(*river.Config)) *node {
	tb.Helper()
	n := &node{}
	own := *cfg
	own.WrapTransport = func(next http.RoundTripper) http.RoundTripper {
		n.transport = next // outbox.New calls this, before n is shared
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Header.Set(nodeHeader, name)
			r.Header.Set(sentHeader, strconv.FormatInt(time.Now().UnixNano(), 10))
			return next.RoundTrip(r)
		})
	}
	b := openBundle(tb, url, &own)
	n.pool, n.outbox = b.pool, b.outbox
	n.client = startClient(tb, b.pool, b.outbox, tune)
	return n
}

// stop stops the node's River client (it is stopped when the test ends in
// any case), waiting for its jobs, and closes its idle connections: the
// goroutines of a connection to a sink in another process outlive the
// test otherwise.
func (n *node) stop(tb testing.TB) {
	tb.Helper()
	stopClient(tb, n.client)
	if t, ok := n.transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

// byNode counts the sink's requests by the node that sent them.
func (s *sink) byNode() map[string]int {
	counts := map[string]int{}
	for _, r := range s.all() {
		counts[r.Header.Get(nodeHeader)]++
	}
	return counts
}

// sentAt returns when a node sent r (sentHeader).
func sentAt(tb testing.TB, r received) time.Time {
	tb.Helper()
	ns, err := strconv.ParseInt(r.Header.Get(sentHeader), 10, 64)
	require.NoError(tb, err, "a request without %s", sentHeader)
	return time.Unix(0, ns)
}

// sentTimes returns when the nodes sent the sink's requests, in order.
func (s *sink) sentTimes(tb testing.TB) []time.Time {
	tb.Helper()
	var at []time.Time
	for _, r := range s.all() {
		at = append(at, sentAt(tb, r))
	}
	slices.SortFunc(at, time.Time.Compare)
	return at
}

// openBundle opens a pool on the database at url, closed when the test
// ends, and an outbox with cfg on it.
func openBundle(tb testing.TB, url string, cfg *outbox.Config) *testBundle {
	tb.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	ob, err := outbox.New(pool, cfg)
	require.NoError(tb, err)
	return &testBundle{pool: pool, outbox: ob}
}

// nodeConfigs are the outbox configs a worker node process can run with,
// by name: a child process cannot be handed a Config, only its name.
var nodeConfigs = map[string]func() *outbox.Config{
	"test":    testConfig,
	"single":  singleJobConfig,
	"circuit": circuitTestConfig,
}

// nodeProcessEnv holds, in a worker node process, its nodeOptions as JSON.
const nodeProcessEnv = "WHARF_OUTBOX_NODE"

// nodeOptions say what TestNodeProcess runs.
type nodeOptions struct {
	URL    string // the database's
	Name   string // the node's, sent in nodeHeader
	Config string // a key of nodeConfigs
	// Follower disables River's leader election in the node, so that a
	// client of the parent's becomes the leader (and runs the stuck-job
	// rescuer) once the node is gone.
	Follower bool
}

// TestNodeProcess is not a test: the tests across processes run the test
// binary again with only this function, which then is a worker node (as
// startNode's, its outbox config named and logging to stderr) that works
// deliveries until the parent stops it, and then reports its counters.
func TestNodeProcess(t *testing.T) {
	if !testproc.Child(t) {
		t.Skip("a worker node process of the tests across processes")
	}
	var opts nodeOptions
	require.NoError(t, json.Unmarshal([]byte(os.Getenv(nodeProcessEnv)), &opts))
	require.Contains(t, nodeConfigs, opts.Config)
	metrics := telemetrytest.NewMetrics(t)
	cfg := nodeConfigs[opts.Config]()
	cfg.MeterProvider = metrics.Provider
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	n := startNodeWith(t, opts.URL, opts.Name, cfg, func(rc *river.Config) { rc.LeaderElectionDisabled = opts.Follower })
	testproc.Ready()
	testproc.AwaitStop()
	n.stop(t)
	counted, err := json.Marshal(countersOf(t, metrics))
	require.NoError(t, err)
	require.NoError(t, testproc.Report("counters", string(counted)))
}

// startNodeProcess starts a worker node in a process of its own
// (TestNodeProcess) and returns once its River client has started. The
// process is stopped when the test ends, and its output logged if the test
// failed.
func startNodeProcess(tb testing.TB, opts nodeOptions) *testproc.Process {
	tb.Helper()
	if opts.Config == "" {
		opts.Config = "test"
	}
	env, err := json.Marshal(opts)
	require.NoError(tb, err)
	return testproc.Start(tb, "TestNodeProcess", nodeProcessEnv+"="+string(env))
}

// nodeCounters are the counters of a test's worker nodes, summed over
// them; gauges need no summing: they read the database, any outbox's do.
type nodeCounters struct {
	Deferred map[string]int64 // wharf_outbox_deferred by reason
	Openings map[string]int64 // wharf_outbox_circuit_openings by endpoint_id
}

// countersOf reads the counters of the nodes whose MeterProvider is
// metrics'. A counter never added to reads empty.
func countersOf(tb testing.TB, metrics *telemetrytest.Metrics) nodeCounters {
	tb.Helper()
	data := metrics.Collect(tb)
	sum := func(name, key string) map[string]int64 {
		if d, ok := data[name]; ok {
			return telemetrytest.SumBy(tb, d, key)
		}
		return map[string]int64{}
	}
	return nodeCounters{
		Deferred: sum("wharf_outbox_deferred", "reason"),
		Openings: sum("wharf_outbox_circuit_openings", "endpoint_id"),
	}
}

// add adds o's counts to c's.
func (c *nodeCounters) add(o nodeCounters) {
	c.Deferred = addCounts(c.Deferred, o.Deferred)
	c.Openings = addCounts(c.Openings, o.Openings)
}

func addCounts(dst, src map[string]int64) map[string]int64 {
	if dst == nil {
		dst = map[string]int64{}
	}
	for k, v := range src {
		dst[k] += v
	}
	return dst
}

// workerNodes starts the two worker nodes of a test across nodes, "a" and
// "b", with the outbox config nodeConfigs[config] on the database at url.
// It returns done, which stops them (waiting for their jobs) and returns
// what they counted.
type workerNodes func(t *testing.T, url, config string) (done func() nodeCounters)

// inOneProcess runs both nodes in the test's process, each with its own
// pool, outbox and River client: quick, and the race detector sees them
// share nothing but the database.
func inOneProcess(t *testing.T, url, config string) func() nodeCounters {
	metrics := telemetrytest.NewMetrics(t)
	cfg := nodeConfigs[config]()
	cfg.MeterProvider = metrics.Provider
	nodes := []*node{startNode(t, url, "a", cfg), startNode(t, url, "b", cfg)}
	return func() nodeCounters {
		for _, n := range nodes {
			n.stop(t)
		}
		return countersOf(t, metrics)
	}
}

// inTwoProcesses runs each node in a process of its own (startNodeProcess):
// nothing is shared but the database, as in production.
func inTwoProcesses(t *testing.T, url, config string) func() nodeCounters {
	var procs []*testproc.Process
	for _, name := range []string{"a", "b"} {
		procs = append(procs, startNodeProcess(t, nodeOptions{URL: url, Name: name, Config: config}))
	}
	return func() nodeCounters {
		var sum nodeCounters
		for _, p := range procs {
			require.NoError(t, p.Stop(), "the node process failed; its output:\n%s", p.Output())
			report, ok := p.Reported("counters")
			require.True(t, ok, "the node process reported no counters; its output:\n%s", p.Output())
			var counted nodeCounters
			require.NoError(t, json.Unmarshal([]byte(report), &counted))
			sum.add(counted)
		}
		return sum
	}
}
