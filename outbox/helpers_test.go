package outbox_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/signature"
)

// testConfig is an outbox config for tests: a short retry schedule without
// jitter, loopback allowed (test sinks listen there), quick snoozes and
// circuit cool-downs.
func testConfig() *outbox.Config {
	return &outbox.Config{
		RetrySchedule:             []time.Duration{0, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond},
		RetryJitter:               -1,
		ThrottledRetryMin:         -1,
		BusyRetryDelay:            20 * time.Millisecond,
		CircuitBreakerCooldown:    50 * time.Millisecond,
		CircuitBreakerMaxCooldown: time.Second,
		EndpointTimeout:           5 * time.Second,
		AllowPrivateNetworks:      true,
		Logger:                    quietLogger(),
		// Long enough that no batch of a test splits on a slow run; the
		// split's own test sets its span.
		DeliveryBatchSpan: 10 * time.Second,
	}
}

// singleJobConfig is testConfig with a job per delivery, for tests of how
// such a job waits its turn that publish several events at once.
func singleJobConfig() *outbox.Config {
	cfg := testConfig()
	cfg.DeliveryBatchSize = 1
	return cfg
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// riverConfig is the River config tests (and the benchmark) work jobs with:
// a short fetch cooldown and poll interval so jobs start within
// milliseconds of being inserted or snoozed.
func riverConfig(ob *outbox.Outbox, workers *river.Workers, maxWorkers int) *river.Config {
	return &river.Config{
		Queues:               map[string]river.QueueConfig{ob.Queue(): {MaxWorkers: maxWorkers}},
		Workers:              workers,
		FetchCooldown:        2 * time.Millisecond,
		FetchPollInterval:    20 * time.Millisecond,
		JobTimeout:           10 * time.Second,
		RescueStuckJobsAfter: 15 * time.Second,
		Logger:               quietLogger(),
	}
}

// startRiver starts a River client working ob's deliveries and stops it
// when the test ends.
func startRiver(t testing.TB, pool *pgxpool.Pool, ob *outbox.Outbox) *river.Client[pgx.Tx] {
	t.Helper()
	return startClient(t, pool, ob, nil)
}

// startClient starts a River client working ob's deliveries, its config
// riverConfig's with 20 workers changed by tune (when not nil), and stops
// it when the test ends.
func startClient(tb testing.TB, pool *pgxpool.Pool, ob *outbox.Outbox, tune func(*river.Config)) *river.Client[pgx.Tx] {
	tb.Helper()
	workers := river.NewWorkers()
	require.NoError(tb, ob.AddWorkers(workers))
	cfg := riverConfig(ob, workers, 20)
	if tune != nil {
		tune(cfg)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(tb, err)
	require.NoError(tb, client.Start(context.Background()))
	tb.Cleanup(func() { stopClient(tb, client) })
	return client
}

// stopClient stops client, waiting up to 10 seconds for its jobs. A
// stopped client stops at once.
func stopClient(tb testing.TB, client *river.Client[pgx.Tx]) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(tb, client.Stop(ctx))
}

type testBundle struct {
	pool   *pgxpool.Pool
	outbox *outbox.Outbox
}

func setup(t *testing.T, cfg *outbox.Config) *testBundle {
	t.Helper()
	pool := testdb.New(t)
	ob, err := outbox.New(pool, cfg)
	require.NoError(t, err)
	return &testBundle{pool: pool, outbox: ob}
}

// publish publishes events in a transaction of their own and commits it.
func (b *testBundle) publish(t *testing.T, events ...*outbox.Event) []*outbox.PublishResult {
	t.Helper()
	ctx := context.Background()
	var results []*outbox.PublishResult
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		results, err = b.outbox.PublishManyTx(ctx, tx, events)
		return err
	}))
	return results
}

// endpoint creates an endpoint for url subscribed to types.
func (b *testBundle) endpoint(t *testing.T, url string, params *outbox.EndpointParams) *outbox.EndpointWithSecret {
	t.Helper()
	if params == nil {
		params = &outbox.EndpointParams{}
	}
	params.URL = url
	ep, err := b.outbox.EndpointCreate(context.Background(), params)
	require.NoError(t, err)
	return ep
}

// awaitTimeout bounds the waits for a delivery's outcome. It is generous
// because CI runs every package's tests at once on two cores; a wait that
// is met returns at once.
const awaitTimeout = 60 * time.Second

// awaitDelivery waits until the delivery of eventID to endpointID has
// status and returns it. When it never does, the failure shows the
// delivery and its River jobs as they stand, to tell a slow run from a
// stuck one.
func (b *testBundle) awaitDelivery(t *testing.T, endpointID uuid.UUID, eventID string, status outbox.DeliveryStatus) *outbox.Delivery {
	t.Helper()
	ctx := context.Background()
	var found *outbox.Delivery
	var last []*outbox.Delivery
	ok := assert.Eventually(t, func() bool {
		list, err := b.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{EndpointID: &endpointID, EventID: eventID})
		require.NoError(t, err)
		last = list
		if len(list) == 1 && list[0].Status == status {
			found = list[0]
			return true
		}
		return false
	}, awaitTimeout, 10*time.Millisecond, "delivery of %s to %s never became %s", eventID, endpointID, status)
	if !ok {
		for _, d := range last {
			t.Logf("delivery %s: status %s, attempts %d, last error %q", d.ID, d.Status, d.Attempts, d.LastError)
			rows, err := b.pool.Query(ctx, `SELECT id, state, attempt, max_attempts, scheduled_at, now(), coalesce(errors::text, '')
				FROM river_job WHERE args->>'delivery_id' = $1 ORDER BY id`, d.ID.String())
			require.NoError(t, err)
			for rows.Next() {
				var id int64
				var state, errs string
				var attempt, maxAttempts int
				var scheduledAt, now time.Time
				require.NoError(t, rows.Scan(&id, &state, &attempt, &maxAttempts, &scheduledAt, &now, &errs))
				t.Logf("  job %d: %s, attempt %d of %d, scheduled %s (now %s), errors %s",
					id, state, attempt, maxAttempts, scheduledAt.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano), errs)
			}
			require.NoError(t, rows.Err())
		}
		t.FailNow()
	}
	return found
}

// received is one request a sink got.
type received struct {
	Header http.Header
	Body   []byte
	At     time.Time
}

// verifyWith verifies the request as a receiver holding secret would, with
// the signature package's Standard Webhooks verifier. The interop module
// checks the same deliveries against the reference library.
func (r received) verifyWith(secret string) error {
	verifier := signature.NewStandardWebhooks(signature.Secrets{secret}, nil)
	return verifier.Verify(context.Background(), &signature.Request{Method: http.MethodPost, Header: r.Header, Body: r.Body})
}

// sink is a webhook receiver on loopback that records requests. Its
// respond function answers the n-th request (from 1).
type sink struct {
	server *httptest.Server

	mu       sync.Mutex
	requests []received
	arrived  chan received

	respond  func(n int, w http.ResponseWriter, r *http.Request)
	conns    atomic.Int64
	inFlight atomic.Int64
	maxSeen  atomic.Int64
}

func newSink(t testing.TB, respond func(n int, w http.ResponseWriter, r *http.Request)) *sink {
	t.Helper()
	s := &sink{respond: respond, arrived: make(chan received, 1000)}
	s.server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.server.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.server.Start()
	t.Cleanup(s.server.Close)
	return s
}

// okSink answers 204 to everything.
func okSink(t testing.TB) *sink {
	return newSink(t, status(http.StatusNoContent))
}

func (s *sink) serve(w http.ResponseWriter, r *http.Request) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		seen := s.maxSeen.Load()
		if n <= seen || s.maxSeen.CompareAndSwap(seen, n) {
			break
		}
	}
	body, _ := io.ReadAll(r.Body)
	rec := received{Header: r.Header.Clone(), Body: body, At: time.Now()}
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	count := len(s.requests)
	s.mu.Unlock()
	select {
	case s.arrived <- rec:
	default:
	}
	s.respond(count, w, r)
}

func (s *sink) URL() string { return s.server.URL }

func (s *sink) all() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.requests...)
}

// byWebhookID counts received requests per webhook-id.
func (s *sink) byWebhookID() map[string]int {
	counts := map[string]int{}
	for _, r := range s.all() {
		counts[r.Header.Get("webhook-id")]++
	}
	return counts
}

// status answers every request with code.
func status(code int) func(int, http.ResponseWriter, *http.Request) {
	return func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }
}

// failFirst answers the first n requests with 500 and the rest with 204.
func failFirst(n int) func(int, http.ResponseWriter, *http.Request) {
	return func(count int, w http.ResponseWriter, _ *http.Request) {
		if count > n {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"error":"try later"}`))
	}
}

// envelopeOf decodes a delivered body.
func envelopeOf(t *testing.T, body []byte) (typ string, data json.RawMessage) {
	t.Helper()
	var env struct {
		Type      string          `json:"type"`
		Timestamp time.Time       `json:"timestamp"`
		Data      json.RawMessage `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &env))
	require.False(t, env.Timestamp.IsZero())
	return env.Type, env.Data
}
