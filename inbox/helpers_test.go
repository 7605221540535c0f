package inbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testclock"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/signature"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

type testBundle struct {
	pool   *pgxpool.Pool
	inbox  *inbox.Inbox
	server *httptest.Server
	clock  *testclock.Clock
}

type setupOpts struct {
	cfg  *inbox.Config // Sources default to one Standard Webhooks source "payments"
	pool *pgxpool.Pool // defaults to a fresh test database
}

func setup(t *testing.T, opts *setupOpts) *testBundle {
	t.Helper()
	if opts == nil {
		opts = &setupOpts{}
	}
	pool := opts.pool
	if pool == nil {
		pool = testdb.New(t)
	}
	cfg := opts.cfg
	if cfg == nil {
		cfg = &inbox.Config{}
	}
	if cfg.Sources == nil {
		cfg.Sources = []inbox.Source{{Name: "payments", Verifier: signature.NewStandardWebhooks(signature.Secrets{testSecret}, nil)}}
	}
	clk := testclock.New(time.Now())
	if cfg.Now == nil {
		cfg.Now = clk.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ib, err := inbox.New(pool, cfg)
	require.NoError(t, err)

	mux := http.NewServeMux()
	mux.Handle("/webhooks/{source}", ib.Handler())
	server := httptest.NewServer(mux)
	t.Cleanup(server.Close)
	return &testBundle{pool: pool, inbox: ib, server: server, clock: clk}
}

// startWorkers starts a River client working the inbox queue with fast
// retries, and returns a channel of finished jobs.
func (b *testBundle) startWorkers(t *testing.T) <-chan *river.Event {
	t.Helper()
	return b.startWorkersWith(t, func(*river.Config) {})
}

// startWorkersWith is startWorkers with the River config adjusted by edit.
func (b *testBundle) startWorkersWith(t *testing.T, edit func(*river.Config)) <-chan *river.Event {
	t.Helper()
	workers := river.NewWorkers()
	require.NoError(t, b.inbox.AddWorkers(workers))
	cfg := &river.Config{
		Queues:            map[string]river.QueueConfig{b.inbox.Queue(): {MaxWorkers: 10}},
		Workers:           workers,
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		RetryPolicy:       fastRetry{},
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		TestOnly:          true,
	}
	edit(cfg)
	client, err := river.NewClient(riverpgxv5.New(b.pool), cfg)
	require.NoError(t, err)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
	ctx := context.Background()
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		cancel()
		require.NoError(t, client.Stop(ctx))
	})
	return events
}

// fastRetry retries after 10 ms so tests do not wait for real backoff.
type fastRetry struct{}

func (fastRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(10 * time.Millisecond) }

// recordingRetry retries after a fixed time and records the attempts it
// was asked about.
type recordingRetry struct {
	after time.Duration
	mu    sync.Mutex
	asked []int
}

func (r *recordingRetry) NextRetry(job *rivertype.JobRow) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, job.Attempt)
	return time.Now().Add(r.after)
}

func (r *recordingRetry) attempts() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.asked)
}

// awaitJob waits for the next job event of a given kind.
func awaitJob(t *testing.T, events <-chan *river.Event, kind river.EventKind) *river.Event {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.Kind == kind {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event within 20s", kind)
			return nil
		}
	}
}

// signed returns a Standard Webhooks–signed POST to the source.
func (b *testBundle) signed(t *testing.T, source, id string, body []byte, ts time.Time) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.server.URL+"/webhooks/"+source, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if id != "" {
		h, err := signature.SignStandardWebhooks([]string{testSecret}, id, ts, body)
		require.NoError(t, err)
		for k, v := range h {
			req.Header[k] = v
		}
	}
	return req
}

type answer struct {
	Status     int
	Body       map[string]any
	RawBody    string
	ReceivedAt string
}

func do(t *testing.T, req *http.Request) answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"), "body: %s", raw)
	a := answer{Status: resp.StatusCode, RawBody: string(raw)}
	require.NoError(t, json.Unmarshal(raw, &a.Body), "body: %s", raw)
	return a
}

// counts returns how many keys, messages and inbox jobs exist.
func (b *testBundle) counts(t *testing.T) (keys, messages, jobs int) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM wharf_inbox_keys").Scan(&keys))
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM wharf_inbox_messages").Scan(&messages))
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind IN ('wharf_inbox_process', 'wharf_inbox_process_batch')").Scan(&jobs))
	return keys, messages, jobs
}

// effects is an application table the handlers write to.
func createEffects(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), "CREATE TABLE effects (event_id text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
	require.NoError(t, err)
}

func applyEffect(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
	_, err := tx.Exec(ctx, "INSERT INTO effects (event_id) VALUES ($1)", msg.EventID)
	return err
}

func effectCount(t *testing.T, pool *pgxpool.Pool, eventID string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM effects WHERE event_id = $1", eventID).Scan(&n))
	return n
}

// receiveMany stores msgs with ReceiveManyTx in a transaction of its own.
func receiveMany(t *testing.T, pool *pgxpool.Pool, ib *inbox.Inbox, msgs []inbox.Incoming) []inbox.Result {
	t.Helper()
	ctx := context.Background()
	var results []inbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		results, err = ib.ReceiveManyTx(ctx, tx, msgs)
		return err
	}))
	return results
}

// awaitSettled waits until no message is in another status than settled.
func awaitSettled(t *testing.T, pool *pgxpool.Pool, settled ...inbox.Status) {
	t.Helper()
	names := make([]string, len(settled))
	for i, s := range settled {
		names[i] = string(s)
	}
	require.Eventually(t, func() bool {
		var pending int
		err := pool.QueryRow(context.Background(), "SELECT count(*) FROM wharf_inbox_messages WHERE status <> ALL($1)", names).Scan(&pending)
		return err == nil && pending == 0
	}, 30*time.Second, 10*time.Millisecond)
}

// payments returns an empty JSON message from source "payments" per id.
func payments(ids ...string) []inbox.Incoming {
	msgs := make([]inbox.Incoming, len(ids))
	for i, id := range ids {
		msgs[i] = inbox.Incoming{Source: "payments", EventID: id, Body: []byte(`{}`)}
	}
	return msgs
}

// typedPayments returns an empty JSON message from "payments" per event
// type, with ids evt_<index>_<type>.
func typedPayments(types ...string) []inbox.Incoming {
	msgs := make([]inbox.Incoming, len(types))
	for i, typ := range types {
		msgs[i] = inbox.Incoming{Source: "payments", EventID: fmt.Sprintf("evt_%d_%s", i, typ), EventType: typ, Body: []byte(`{}`)}
	}
	return msgs
}

// jobOf returns the job a message is on (0 for none).
func jobOf(t *testing.T, pool *pgxpool.Pool, messageID uuid.UUID) int64 {
	t.Helper()
	var jobID int64
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT coalesce(job_id, 0) FROM wharf_inbox_messages WHERE id = $1", messageID).Scan(&jobID))
	return jobID
}
