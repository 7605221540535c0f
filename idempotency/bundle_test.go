package idempotency_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/idempotency"
	"github.com/wharfhq/wharf/internal/testdb"
)

// bodyMarker is in every request body the tests send, so that they can check
// it never reaches the logs.
const bodyMarker = "body-marker-never-logged"

// appSchema is the application side of the tests: a balance that payouts
// debit, as in the example app.
const appSchema = `
CREATE TABLE balances (account text PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO balances VALUES ('acct_1', 100), ('acct_2', 100);`

type testBundle struct {
	url    string
	pool   *pgxpool.Pool
	logs   *testdb.LockedBuffer
	calls  atomic.Int64 // handler runs
	server *httptest.Server
	client *http.Client
	opts   testOptions
}

type testOptions struct {
	// config for the middleware; Logger is the bundle's unless set.
	config idempotency.Config
	// handler builds the wrapped handler; nil means (*testBundle).payout.
	handler func(b *testBundle) http.HandlerFunc
	// served, when set, is called each time the middleware has returned.
	served func()
	// gates are opened when the test ends, before the server shuts down
	// (which waits for handlers blocked on them).
	gates []*gate
	// runtimeParams are set on every connection of the bundle's pool.
	runtimeParams map[string]string
	// pgbouncerMode, when set, puts PgBouncer in transaction mode between
	// the middleware's pool and the database, with pgx in this mode.
	pgbouncerMode string
}

// setup starts a server on a fresh database. Routes: POST /payouts, POST
// /refunds (same handler, another scope) and GET /payouts, each wrapped by
// one middleware; the principal is the X-Account header.
func setup(t *testing.T, opts testOptions) *testBundle {
	t.Helper()
	ctx := context.Background()
	url := testdb.NewURL(t)
	if opts.pgbouncerMode != "" {
		url = testdb.NewPgBouncer(t, url).URL(opts.pgbouncerMode)
	}
	poolConfig, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	maps.Copy(poolConfig.ConnConfig.RuntimeParams, opts.runtimeParams)
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, appSchema)
	require.NoError(t, err)

	b := &testBundle{url: url, pool: pool, logs: &testdb.LockedBuffer{}, opts: opts}
	b.server = b.startNode(t, opts.config)
	// No keep-alive: net/http's Transport silently re-sends a request that
	// carries an Idempotency-Key when a reused connection breaks, which
	// would hide the broken connection of a panicking handler.
	b.client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	t.Cleanup(func() { require.NotContains(t, b.logs.String(), bodyMarker, "a body reached the logs") })
	return b
}

// startNode starts a server like the bundle's own, with a middleware of its
// own configured by conf, on the bundle's database and handler: another
// node of the same application.
func (b *testBundle) startNode(t *testing.T, conf idempotency.Config) *httptest.Server {
	t.Helper()
	if conf.Logger == nil {
		conf.Logger = slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	mw, err := idempotency.New(b.pool, accountPrincipal, &conf)
	require.NoError(t, err)

	handler := b.payout
	if b.opts.handler != nil {
		handler = b.opts.handler(b)
	}
	wrapped := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.calls.Add(1)
		handler(w, r)
	}))
	if b.opts.served != nil {
		inner := wrapped
		wrapped = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer b.opts.served()
			inner.ServeHTTP(w, r)
		})
	}
	mux := http.NewServeMux()
	for _, pattern := range []string{"POST /payouts", "POST /refunds", "GET /payouts"} {
		mux.Handle(pattern, wrapped)
	}
	server := httptest.NewUnstartedServer(mux)
	server.Config.ErrorLog = log.New(io.Discard, "", 0) // handler panics are expected
	server.Start()
	t.Cleanup(server.Close)
	for _, g := range b.opts.gates {
		t.Cleanup(g.open) // before the server closes, which waits for handlers
	}
	return server
}

func accountPrincipal(r *http.Request) string { return r.Header.Get("X-Account") }

type payoutRequest struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
	Note    string `json:"note,omitempty"`
}

// payoutBody returns a request body debiting amount from account.
func payoutBody(account string, amount int64) string {
	out, _ := json.Marshal(payoutRequest{Account: account, Amount: amount, Note: bodyMarker})
	return string(out)
}

// querier is what debit needs of a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// db returns the middleware's transaction when there is one, else the pool.
func (b *testBundle) db(r *http.Request) querier {
	if tx := idempotency.Tx(r.Context()); tx != nil {
		return tx
	}
	return b.pool
}

// debit applies the payout in r's body and returns the new balance.
func (b *testBundle) debit(r *http.Request) (payoutRequest, int64, error) {
	var in payoutRequest
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		return in, 0, err
	}
	var balance int64
	err := b.db(r).QueryRow(r.Context(),
		"UPDATE balances SET balance = balance - $2 WHERE account = $1 RETURNING balance",
		in.Account, in.Amount).Scan(&balance)
	return in, balance, err
}

// debitOrFail debits as debit does and answers 500 when that fails; ok
// says whether the handler should go on.
func (b *testBundle) debitOrFail(w http.ResponseWriter, r *http.Request) (in payoutRequest, balance int64, ok bool) {
	in, balance, err := b.debit(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return in, 0, false
	}
	return in, balance, true
}

// payout is the default handler: debit, then 201.
func (b *testBundle) payout(w http.ResponseWriter, r *http.Request) {
	if in, balance, ok := b.debitOrFail(w, r); ok {
		b.created(w, in.Account, balance)
	}
}

// holdingFirstRun returns a payout handler whose first run debits, opens
// entered and waits for release before answering; later runs do not wait.
func holdingFirstRun(entered, release *gate) func(b *testBundle) http.HandlerFunc {
	return func(b *testBundle) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			in, balance, ok := b.debitOrFail(w, r)
			if !ok {
				return
			}
			if b.calls.Load() == 1 {
				entered.open()
				release.wait()
			}
			b.created(w, in.Account, balance)
		}
	}
}

// created answers 201 with a payout id unique to this handler run, a
// Location (replayed) and an X-Trace header (not replayed).
func (b *testBundle) created(w http.ResponseWriter, account string, balance int64) {
	id := fmt.Sprintf("po_%d", b.calls.Load())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payouts/"+id)
	w.Header().Set("X-Trace", "fresh-per-response")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"payout_id": id, "account": account, "balance": balance})
}

type result struct {
	status int
	header http.Header
	body   string
}

// errorMessage returns the "error" field of a JSON error body.
func (r result) errorMessage(t *testing.T) string {
	t.Helper()
	require.Equal(t, "application/json", r.header.Get("Content-Type"), "body: %s", r.body)
	var out struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.body), &out), "body: %s", r.body)
	require.NotEmpty(t, out.Error)
	return out.Error
}

func (r result) replayed() bool { return r.header.Get(idempotency.HeaderReplayed) == "true" }

type request struct {
	method  string // POST unless set
	path    string // /payouts unless set
	account string // X-Account; none when empty
	keys    []string
	body    string
	ctx     context.Context
	node    *httptest.Server // the bundle's server unless set
}

// send makes a request without failing the test, for use from goroutines.
func (b *testBundle) send(req request) (result, error) {
	method, path, ctx := req.method, req.path, req.ctx
	if method == "" {
		method = http.MethodPost
	}
	if path == "" {
		path = "/payouts"
	}
	if ctx == nil {
		ctx = context.Background()
	}
	node := req.node
	if node == nil {
		node = b.server
	}
	hr, err := http.NewRequestWithContext(ctx, method, node.URL+path, strings.NewReader(req.body))
	if err != nil {
		return result{}, err
	}
	if req.account != "" {
		hr.Header.Set("X-Account", req.account)
	}
	for _, key := range req.keys {
		hr.Header.Add(idempotency.HeaderKey, key)
	}
	resp, err := b.client.Do(hr)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: string(body)}, err
}

// sendAsync sends req in the background. The answer arrives on the channel;
// a request that could not be made arrives with status 0 and the error as
// its body.
func (b *testBundle) sendAsync(req request) <-chan result {
	done := make(chan result, 1)
	go func() {
		res, err := b.send(req)
		if err != nil {
			res.body = err.Error()
		}
		done <- res
	}()
	return done
}

// sendTogether sends n copies of req at once (released by one barrier) and
// returns the answers, failing the test if any could not be made.
func (b *testBundle) sendTogether(t *testing.T, n int, req request) []result {
	t.Helper()
	start := make(chan struct{})
	type answer struct {
		res result
		err error
	}
	answers := make(chan answer, n)
	for range n {
		go func() {
			<-start
			res, err := b.send(req)
			answers <- answer{res, err}
		}()
	}
	close(start)
	out := make([]result, 0, n)
	for range n {
		a := <-answers
		require.NoError(t, a.err)
		out = append(out, a.res)
	}
	return out
}

// do makes a request and fails the test if it cannot.
func (b *testBundle) do(t *testing.T, req request) result {
	t.Helper()
	res, err := b.send(req)
	require.NoError(t, err)
	return res
}

// payoutOf makes the usual payout request: acct_1 pays 10 under key.
func payoutOf(key string) request {
	return request{account: "acct_1", keys: []string{key}, body: payoutBody("acct_1", 10)}
}

func (b *testBundle) balance(t *testing.T, account string) int64 {
	t.Helper()
	var balance int64
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT balance FROM balances WHERE account = $1", account).Scan(&balance))
	return balance
}

// keyStatus returns the stored status of key ("" when there is no row).
func (b *testBundle) keyStatus(t *testing.T, key string) string {
	t.Helper()
	var status string
	err := b.pool.QueryRow(context.Background(),
		"SELECT status FROM wharf_idempotency_keys WHERE idempotency_key = $1", key).Scan(&status)
	if err == pgx.ErrNoRows {
		return ""
	}
	require.NoError(t, err)
	return status
}

// age makes d pass, as the database's clock sees it, for key: its stored
// times move d into the past. Tests move time this way because the
// middleware judges every time by the database's clock.
func (b *testBundle) age(t *testing.T, key string, d time.Duration) {
	t.Helper()
	tag, err := b.pool.Exec(context.Background(), `
		UPDATE wharf_idempotency_keys
		SET claimed_at = claimed_at - $2::interval, expires_at = expires_at - $2::interval,
		    completed_at = completed_at - $2::interval
		WHERE idempotency_key = $1`, key, d)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), "key %s", key)
}

func (b *testBundle) keyCount(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM wharf_idempotency_keys").Scan(&n))
	return n
}

// gate blocks handler runs until opened. Opening it twice is harmless, so
// setup can open it when a failing test ends (see testOptions.gates).
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) open()                   { g.once.Do(func() { close(g.ch) }) }
func (g *gate) wait()                   { <-g.ch }
func (g *gate) opened() <-chan struct{} { return g.ch }

// modes runs f once per mode, as parallel subtests.
func modes(t *testing.T, f func(t *testing.T, transactional bool)) {
	for _, transactional := range []bool{false, true} {
		name := "NonTransactional"
		if transactional {
			name = "Transactional"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, transactional)
		})
	}
}
