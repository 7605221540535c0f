package portal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/portal"
)

var testKey = bytes.Repeat([]byte("k"), 32)

type fixture struct {
	pool    *pgxpool.Pool
	outbox  *outbox.Outbox
	handler *portal.Handler
	server  *httptest.Server
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newFixture is a portal over a fresh database, served at /portal, with
// River working deliveries.
func newFixture(t *testing.T, catalog *outbox.Catalog) *fixture {
	t.Helper()
	pool := testdb.New(t)
	ob, err := outbox.New(pool, &outbox.Config{
		AllowPrivateNetworks: true, Logger: quiet(), Catalog: catalog,
		RetrySchedule: []time.Duration{0, 10 * time.Millisecond}, RetryJitter: -1,
	})
	require.NoError(t, err)
	h, err := portal.New(&portal.Config{Outbox: ob, Pool: pool, Keys: [][]byte{testKey}, Prefix: "/portal", Logger: quiet()})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/portal/", h)
	server := httptest.NewServer(mux)
	t.Cleanup(server.Close)

	workers := river.NewWorkers()
	require.NoError(t, ob.AddWorkers(workers))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:        map[string]river.QueueConfig{ob.Queue(): {MaxWorkers: 10}},
		Workers:       workers,
		FetchCooldown: 2 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond,
		Logger: quiet(),
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})
	return &fixture{pool: pool, outbox: ob, handler: h, server: server}
}

func token(t *testing.T, tenant string, readOnly bool) string {
	t.Helper()
	tok, err := portal.NewToken(testKey, portal.Token{Tenant: tenant, Expires: time.Now().Add(time.Hour), ReadOnly: readOnly})
	require.NoError(t, err)
	return tok
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r *response) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal(r.body, &v), string(r.body))
	return v
}

// call sends a request to the API with a bearer token (none when tok is
// "") and body as JSON (none when nil; a string is sent as it is).
func (f *fixture) call(t *testing.T, tok, method, path string, body any) *response {
	t.Helper()
	var reader io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		reader = bytes.NewBufferString(b)
	default:
		data, err := json.Marshal(b)
		require.NoError(t, err)
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, f.server.URL+"/portal/api/v1"+path, reader)
	require.NoError(t, err)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.server.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return &response{status: resp.StatusCode, header: resp.Header, body: data}
}

// publish publishes events in one transaction.
func (f *fixture) publish(t *testing.T, events ...*outbox.Event) []*outbox.PublishResult {
	t.Helper()
	ctx := context.Background()
	var results []*outbox.PublishResult
	require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		var err error
		results, err = f.outbox.PublishManyTx(ctx, tx, events)
		return err
	}))
	return results
}

// receiver records the webhooks it is sent.
type receiver struct {
	server *httptest.Server
	mu     sync.Mutex
	got    []*http.Request
	bodies [][]byte
	notify chan struct{}
	// status, when not 0, is the status code it answers.
	status atomic.Int32
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{notify: make(chan struct{}, 100)}
	r.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, req)
		r.bodies = append(r.bodies, body)
		r.mu.Unlock()
		if code := r.status.Load(); code != 0 {
			w.WriteHeader(int(code))
		}
		select {
		case r.notify <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(r.server.Close)
	return r
}

// await waits until n webhooks arrived and returns them.
func (r *receiver) await(t *testing.T, n int) ([]*http.Request, [][]byte) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		if len(r.got) >= n {
			got, bodies := append([]*http.Request(nil), r.got...), append([][]byte(nil), r.bodies...)
			r.mu.Unlock()
			return got, bodies
		}
		r.mu.Unlock()
		select {
		case <-r.notify:
		case <-deadline:
			t.Fatalf("waited 30s for %d webhooks", n)
		}
	}
}
