package inbox_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/audit"
	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/signature"
)

func TestConcurrentDuplicateDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	createEffects(t, b.pool)
	b.inbox.Handle("payments", inbox.Wildcard, applyEffect)

	body := []byte(`{"type":"payment.succeeded","data":{"account":"acct_1","amount":125}}`)
	const deliveries = 50
	answers := make(chan answer, deliveries)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range deliveries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := b.signed(t, "payments", "msg_concurrent", body, time.Now())
			<-start
			answers <- do(t, req)
		}()
	}
	close(start)
	wg.Wait()
	close(answers)

	accepted, duplicates := 0, 0
	for a := range answers {
		require.Equal(t, http.StatusOK, a.Status, a.RawBody)
		require.Equal(t, "msg_concurrent", a.Body["event_id"])
		switch a.Body["status"] {
		case "accepted":
			accepted++
		case "duplicate":
			duplicates++
			require.NotEmpty(t, a.Body["received_at"])
		}
	}
	require.Equal(t, 1, accepted)
	require.Equal(t, deliveries-1, duplicates)

	keys, messages, jobs := b.counts(t)
	require.Equal(t, []int{1, 1, 1}, []int{keys, messages, jobs})

	events := b.startWorkers(t)
	awaitJob(t, events, river.EventKindJobCompleted)
	require.Equal(t, 1, effectCount(t, b.pool, "msg_concurrent"))
}

func TestHandlerRetriesThenSucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	createEffects(t, b.pool)
	var calls atomic.Int32
	b.inbox.Handle("payments", "payment.succeeded", func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		// The effect is written before failing: the rollback must undo it.
		if err := applyEffect(ctx, tx, msg); err != nil {
			return err
		}
		if calls.Add(1) <= 2 {
			return errors.New("downstream unavailable")
		}
		return nil
	})
	events := b.startWorkers(t)

	a := do(t, b.signed(t, "payments", "msg_retry", []byte(`{"type":"payment.succeeded"}`), time.Now()))
	require.Equal(t, "accepted", a.Body["status"])
	awaitJob(t, events, river.EventKindJobCompleted)

	require.EqualValues(t, 3, calls.Load())
	require.Equal(t, 1, effectCount(t, b.pool, "msg_retry"))
	msg := onlyMessage(t, b)
	require.Equal(t, inbox.StatusProcessed, msg.Status)
	require.Equal(t, 3, msg.Attempts)
	require.Equal(t, "downstream unavailable", msg.LastError)
	require.NotNil(t, msg.ProcessedAt)
}

func TestHandlerDeadThenReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 3}})
	createEffects(t, b.pool)
	var fixed atomic.Bool
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if err := applyEffect(ctx, tx, msg); err != nil {
			return err
		}
		if !fixed.Load() {
			return errors.New("bug in handler")
		}
		return nil
	})
	events := b.startWorkers(t)

	do(t, b.signed(t, "payments", "msg_dead", []byte(`{"type":"x"}`), time.Now()))
	for range 3 {
		awaitJob(t, events, river.EventKindJobFailed)
	}
	msg := onlyMessage(t, b)
	require.Equal(t, inbox.StatusDead, msg.Status)
	require.Equal(t, 3, msg.Attempts)
	require.Equal(t, "bug in handler", msg.LastError)
	require.Zero(t, effectCount(t, b.pool, "msg_dead"))

	// Processed messages cannot be replayed; unknown ids are not found.
	require.ErrorIs(t, b.inbox.Replay(context.Background(), [16]byte{1}), inbox.ErrNotFound)

	fixed.Store(true)
	require.NoError(t, b.inbox.Replay(context.Background(), msg.ID))
	awaitJob(t, events, river.EventKindJobCompleted)
	msg = onlyMessage(t, b)
	require.Equal(t, inbox.StatusProcessed, msg.Status)
	require.Equal(t, 1, effectCount(t, b.pool, "msg_dead"))
	require.ErrorIs(t, b.inbox.Replay(context.Background(), msg.ID), inbox.ErrNotReplayable)
}

func TestPermanentFailureSkipsRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var calls atomic.Int32
	b.inbox.Handle("payments", inbox.Wildcard, func(context.Context, pgx.Tx, *inbox.Message) error {
		calls.Add(1)
		return inbox.Permanent(errors.New("unknown account"))
	})
	events := b.startWorkers(t)
	do(t, b.signed(t, "payments", "msg_perm", []byte(`{"type":"x"}`), time.Now()))
	awaitJob(t, events, river.EventKindJobCancelled)

	msg := onlyMessage(t, b)
	require.Equal(t, inbox.StatusDead, msg.Status)
	require.Contains(t, msg.LastError, "unknown account")
	require.EqualValues(t, 1, calls.Load())
}

func TestHandlerPanicIsAFailure(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 1}})
	b.inbox.Handle("payments", inbox.Wildcard, func(context.Context, pgx.Tx, *inbox.Message) error {
		panic("nil map")
	})
	events := b.startWorkers(t)
	do(t, b.signed(t, "payments", "msg_panic", []byte(`{}`), time.Now()))
	awaitJob(t, events, river.EventKindJobFailed)
	msg := onlyMessage(t, b)
	require.Equal(t, inbox.StatusDead, msg.Status)
	require.Contains(t, msg.LastError, "handler panicked: nil map")
}

func TestMissingHandlerRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 1}})
	events := b.startWorkers(t)
	do(t, b.signed(t, "payments", "msg_nohandler", []byte(`{"type":"refund.created"}`), time.Now()))
	awaitJob(t, events, river.EventKindJobFailed)
	msg := onlyMessage(t, b)
	require.Equal(t, inbox.StatusDead, msg.Status)
	require.Contains(t, msg.LastError, `no handler registered for source "payments", type "refund.created"`)
}

func TestHandlerRouting(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	got := make(chan string, 4)
	route := func(name string) inbox.Handler {
		return func(_ context.Context, _ pgx.Tx, msg *inbox.Message) error {
			got <- name + ":" + msg.EventID
			return nil
		}
	}
	b.inbox.Handle("payments", "payment.succeeded", route("exact"))
	b.inbox.Handle("payments", inbox.Wildcard, route("source"))
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, route("all"))
	events := b.startWorkers(t)

	ctx := context.Background()
	for _, in := range []inbox.Incoming{
		{Source: "payments", EventID: "e1", EventType: "payment.succeeded", Body: []byte(`{}`)},
		{Source: "payments", EventID: "e2", EventType: "payment.failed", Body: []byte(`{}`)},
		{Source: "crm", EventID: "e3", EventType: "payment.succeeded", Body: []byte(`{}`)},
	} {
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := b.inbox.ReceiveTx(ctx, tx, in)
			return err
		}))
	}
	seen := map[string]bool{}
	for range 3 {
		awaitJob(t, events, river.EventKindJobCompleted)
		seen[<-got] = true
	}
	require.Equal(t, map[string]bool{"exact:e1": true, "source:e2": true, "all:e3": true}, seen)
}

func TestRetryAcrossMidnightIsDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// A day beyond the partitions Migrate created: ReceiveTx must create them.
	midnight := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 30)
	body := []byte(`{"type":"payment.succeeded"}`)

	b.clock.Set(midnight.Add(-time.Millisecond))
	first := do(t, b.signed(t, "payments", "msg_midnight", body, time.Now()))
	require.Equal(t, "accepted", first.Body["status"], first.RawBody)

	b.clock.Set(midnight.Add(time.Millisecond))
	second := do(t, b.signed(t, "payments", "msg_midnight", body, time.Now()))
	require.Equal(t, "duplicate", second.Body["status"], second.RawBody)
	receivedAt, err := time.Parse(time.RFC3339Nano, second.Body["received_at"].(string))
	require.NoError(t, err)
	require.True(t, receivedAt.Equal(midnight.Add(-time.Millisecond)), "received_at %s", receivedAt)

	// The second day's first message goes to a partition of its own.
	third := do(t, b.signed(t, "payments", "msg_after_midnight", body, time.Now()))
	require.Equal(t, "accepted", third.Body["status"], third.RawBody)
	var partitions []string
	rows, err := b.pool.Query(context.Background(),
		"SELECT DISTINCT tableoid::regclass::text FROM wharf_inbox_messages ORDER BY 1")
	require.NoError(t, err)
	partitions, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{
		"wharf_inbox_messages_p" + midnight.AddDate(0, 0, -1).Format("20060102"),
		"wharf_inbox_messages_p" + midnight.Format("20060102"),
	}, partitions)
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{cfg: &inbox.Config{Sources: []inbox.Source{
		{Name: "payments", Verifier: signature.NewStandardWebhooks(signature.Secrets{testSecret}, nil), MaxBodyBytes: 1024},
	}}})
	good := []byte(`{"type":"payment.succeeded"}`)

	tests := []struct {
		name   string
		req    func() *http.Request
		status int
		error  string
	}{
		{"WrongSignature", func() *http.Request {
			r := b.signed(t, "payments", "msg_1", good, time.Now())
			r.Header.Set(signature.HeaderWebhookSignature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
			return r
		}, http.StatusUnauthorized, "no matching signature"},
		{"TamperedBody", func() *http.Request {
			r := b.signed(t, "payments", "msg_1", good, time.Now())
			tampered := `{"type":"payment.succeeded","amount":1e9}`
			r.Body, r.ContentLength = io.NopCloser(strings.NewReader(tampered)), int64(len(tampered))
			return r
		}, http.StatusUnauthorized, "no matching signature"},
		{"MissingSignature", func() *http.Request {
			return b.signed(t, "payments", "", good, time.Now())
		}, http.StatusUnauthorized, "missing header"},
		{"ExpiredSignature", func() *http.Request {
			return b.signed(t, "payments", "msg_1", good, time.Now().Add(-6*time.Minute))
		}, http.StatusUnauthorized, "timestamp outside tolerance"},
		{"MalformedJSON", func() *http.Request {
			return b.signed(t, "payments", "msg_1", []byte(`{"type":`), time.Now())
		}, http.StatusBadRequest, "not valid JSON"},
		{"MalformedJSONWithIDHeader", func() *http.Request {
			r := b.signed(t, "payments", "msg_1", []byte(`not json`), time.Now())
			r.Header.Set("X-Event-ID", "evt_1")
			return r
		}, http.StatusBadRequest, "not valid JSON"},
		{"Oversized", func() *http.Request {
			return b.signed(t, "payments", "msg_1", []byte(`{"pad":"`+strings.Repeat("x", 2000)+`"}`), time.Now())
		}, http.StatusRequestEntityTooLarge, "size limit"},
		{"OversizedWithoutContentLength", func() *http.Request {
			r := b.signed(t, "payments", "msg_1", []byte(`{"pad":"`+strings.Repeat("x", 2000)+`"}`), time.Now())
			r.ContentLength = -1 // chunked: the limit must hold while reading
			return r
		}, http.StatusRequestEntityTooLarge, "size limit"},
		{"UnknownSource", func() *http.Request {
			return b.signed(t, "nope", "msg_1", good, time.Now())
		}, http.StatusNotFound, "unknown source"},
		{"NotPost", func() *http.Request {
			r := b.signed(t, "payments", "msg_1", good, time.Now())
			r.Method = http.MethodPut
			return r
		}, http.StatusMethodNotAllowed, "only POST"},
		{"EventIDTooLong", func() *http.Request {
			return b.signed(t, "payments", strings.Repeat("x", 600), good, time.Now())
		}, http.StatusBadRequest, "event id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := do(t, tt.req())
			require.Equal(t, tt.status, a.Status, a.RawBody)
			require.Contains(t, a.Body["error"], tt.error)
			require.NotContains(t, a.RawBody, "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
		})
	}
	keys, messages, jobs := b.counts(t)
	require.Equal(t, []int{0, 0, 0}, []int{keys, messages, jobs})
}

func TestPayloadMismatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	verifier := signature.NewStandardWebhooks(signature.Secrets{testSecret}, nil)
	b := setup(t, &setupOpts{pool: pool, cfg: &inbox.Config{Sources: []inbox.Source{
		{Name: "payments", Verifier: verifier},
		{Name: "strict", Verifier: verifier, OnMismatch: inbox.MismatchConflict},
		{Name: "volatile", Verifier: verifier, HashExcludeFields: []string{"sent_at"}},
	}}})

	first := []byte(`{"type":"a","amount":1}`)
	second := []byte(`{"type":"a","amount":2}`)
	for source, want := range map[string]int{"payments": http.StatusOK, "strict": http.StatusConflict} {
		require.Equal(t, "accepted", do(t, b.signed(t, source, "msg_reused", first, time.Now())).Body["status"])
		// Same payload re-ordered and re-spaced: a plain duplicate.
		again := do(t, b.signed(t, source, "msg_reused", []byte(`{ "amount": 1, "type": "a" }`), time.Now()))
		require.Equal(t, "duplicate", again.Body["status"])
		a := do(t, b.signed(t, source, "msg_reused", second, time.Now()))
		require.Equal(t, want, a.Status, a.RawBody)

		var mismatches int
		require.NoError(t, pool.QueryRow(ctx,
			"SELECT mismatch_count FROM wharf_inbox_keys WHERE source = $1", source).Scan(&mismatches))
		require.Equal(t, 1, mismatches, source)
		var duplicates int
		require.NoError(t, pool.QueryRow(ctx,
			"SELECT duplicate_count FROM wharf_inbox_keys WHERE source = $1", source).Scan(&duplicates))
		require.Equal(t, 2, duplicates, "%s: both later deliveries counted as duplicates", source)
	}

	// Excluded volatile fields do not count as a different payload.
	do(t, b.signed(t, "volatile", "msg_v", []byte(`{"type":"a","sent_at":"10:00"}`), time.Now()))
	do(t, b.signed(t, "volatile", "msg_v", []byte(`{"type":"a","sent_at":"10:05"}`), time.Now()))
	var mismatches int
	require.NoError(t, pool.QueryRow(ctx, "SELECT mismatch_count FROM wharf_inbox_keys WHERE source = 'volatile'").Scan(&mismatches))
	require.Zero(t, mismatches)
}

func TestReceiveRolledBackLeavesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	res, err := b.inbox.ReceiveTx(ctx, tx, inbox.Incoming{Source: "payments", EventID: "e1", Body: []byte(`{}`)})
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.NoError(t, tx.Rollback(ctx))

	keys, messages, jobs := b.counts(t)
	require.Equal(t, []int{0, 0, 0}, []int{keys, messages, jobs})

	// The key was never claimed: the next receipt is new.
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		res, err = b.inbox.ReceiveTx(ctx, tx, inbox.Incoming{Source: "payments", EventID: "e1", Body: []byte(`{}`)})
		return err
	}))
	require.False(t, res.Duplicate)
}

func TestReceiveRejectsInvalidMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	for _, in := range []inbox.Incoming{
		{Source: "", EventID: "e"},
		{Source: "s", EventID: ""},
		{Source: "s", EventID: "a\x00b"},
		{Source: "s", EventID: strings.Repeat("é", inbox.MaxEventIDLength+1)},
		{Source: "s", EventID: "e", EventType: string([]byte{0xff})},
	} {
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = b.inbox.ReceiveTx(ctx, tx, in)
		require.ErrorIs(t, err, inbox.ErrInvalidMessage)
		require.NoError(t, tx.Commit(ctx), "the transaction stays usable")
	}
	keys, messages, jobs := b.counts(t)
	require.Equal(t, []int{0, 0, 0}, []int{keys, messages, jobs})
}

func TestPostgresUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	proxy, proxied := testdb.NewProxy(t, testdb.NewURL(t))
	cfg, err := pgxpool.ParseConfig(proxied)
	require.NoError(t, err)
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b := setup(t, &setupOpts{pool: pool, cfg: &inbox.Config{ReceiveTimeout: 3 * time.Second}})
	body := []byte(`{"type":"payment.succeeded"}`)

	// Down before the request.
	proxy.SetDown(true)
	a := do(t, b.signed(t, "payments", "msg_down", body, time.Now()))
	require.Equal(t, http.StatusServiceUnavailable, a.Status, a.RawBody)
	require.Contains(t, a.Body["error"], "nothing was recorded")

	// Down in the middle of the transaction: the connection dies after the
	// key is claimed and before commit.
	proxy.SetDown(false)
	cut := make(chan struct{})
	b.inbox.Handle("payments", inbox.Wildcard, applyEffect)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = b.inbox.ReceiveTx(ctx, tx, inbox.Incoming{Source: "payments", EventID: "msg_down", Body: body})
	require.NoError(t, err)
	go func() { proxy.SetDown(true); close(cut) }()
	<-cut
	require.Error(t, tx.Commit(ctx))

	// Back up: nothing half-written, and the sender's retry is accepted.
	proxy.SetDown(false)
	keys, messages, jobs := countVia(t, pool)
	require.Equal(t, []int{0, 0, 0}, []int{keys, messages, jobs})
	a = do(t, b.signed(t, "payments", "msg_down", body, time.Now()))
	require.Equal(t, "accepted", a.Body["status"], a.RawBody)
	keys, messages, jobs = countVia(t, pool)
	require.Equal(t, []int{1, 1, 1}, []int{keys, messages, jobs})
}

func countVia(t *testing.T, pool *pgxpool.Pool) (keys, messages, jobs int) {
	t.Helper()
	b := &testBundle{pool: pool}
	var err error
	// The pool may still hold connections the proxy cut; retry until a
	// live one answers.
	require.Eventually(t, func() bool {
		err = pool.Ping(context.Background())
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "ping: %v", err)
	return b.counts(t)
}

func onlyMessage(t *testing.T, b *testBundle) *inbox.Message {
	t.Helper()
	var id [16]byte
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT id FROM wharf_inbox_messages").Scan(&id))
	msg, err := b.inbox.Get(context.Background(), id)
	require.NoError(t, err)
	return msg
}

// TestNewDayUnderLoadWithSmallPool: the first messages of a day whose
// partition does not exist yet arrive concurrently, more of them than the
// pool has connections. Every transaction holds a connection; creating the
// partition must not need another one from the pool, or all would wait for
// ever.
func TestNewDayUnderLoadWithSmallPool(t *testing.T) {
	t.Parallel()
	pool := testdb.NewWithMaxConns(t, 2)
	b := setup(t, &setupOpts{pool: pool, cfg: &inbox.Config{ReceiveTimeout: 5 * time.Second}})
	b.clock.Set(time.Now().AddDate(0, 0, 45)) // far beyond the partitions Migrate made

	const senders = 12
	var wg sync.WaitGroup
	answers := make(chan answer, senders)
	start := make(chan struct{})
	for i := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := b.signed(t, "payments", "msg_load_"+string(rune('a'+i)), []byte(`{"type":"x"}`), time.Now())
			<-start
			answers <- do(t, req)
		}()
	}
	close(start)
	wg.Wait()
	close(answers)
	for a := range answers {
		require.Equal(t, http.StatusOK, a.Status, a.RawBody)
		require.Equal(t, "accepted", a.Body["status"])
	}
}

func TestHandlerJobCancelIsDead(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(context.Context, pgx.Tx, *inbox.Message) error {
		return river.JobCancel(errors.New("not for us"))
	})
	events := b.startWorkers(t)
	do(t, b.signed(t, "payments", "msg_cancel", []byte(`{}`), time.Now()))
	awaitJob(t, events, river.EventKindJobCancelled)
	msg := onlyMessage(t, b)
	require.Equal(t, inbox.StatusDead, msg.Status, "a cancelled job leaves no message failed for ever")
	require.Contains(t, msg.LastError, "not for us")
}

func TestHandlerSnoozeIsNotAFailure(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 1}})
	var calls atomic.Int32
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(context.Context, pgx.Tx, *inbox.Message) error {
		if calls.Add(1) == 1 {
			return river.JobSnooze(10 * time.Millisecond)
		}
		return nil
	})
	events := b.startWorkers(t)
	do(t, b.signed(t, "payments", "msg_snooze", []byte(`{}`), time.Now()))
	awaitJob(t, events, river.EventKindJobCompleted)
	msg := onlyMessage(t, b)
	require.Equal(t, inbox.StatusProcessed, msg.Status, "with MaxAttempts 1, a snooze counted as a failure would have killed it")
	require.Empty(t, msg.LastError)
	require.EqualValues(t, 2, calls.Load())
}

// TestForgetBeforeProcessing: an erased message is never handed to its
// handler, its job is gone, and it cannot be replayed.
func TestForgetBeforeProcessing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	var calls atomic.Int32
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(context.Context, pgx.Tx, *inbox.Message) error {
		calls.Add(1)
		return nil
	})
	do(t, b.signed(t, "payments", "msg_forget", []byte(`{"card":"4242"}`), time.Now()))
	n, err := b.inbox.Forget(ctx, "payments", "msg_forget")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, _, jobs := b.counts(t)
	require.Zero(t, jobs, "the waiting job is deleted")

	msg := onlyMessage(t, b)
	require.Equal(t, inbox.StatusDead, msg.Status)
	require.Empty(t, msg.Body)
	require.NotNil(t, msg.ScrubbedAt)
	require.ErrorIs(t, b.inbox.Replay(ctx, msg.ID), inbox.ErrNotReplayable)

	// A redelivery is a duplicate: the data is not stored again.
	a := do(t, b.signed(t, "payments", "msg_forget", []byte(`{"card":"4242"}`), time.Now()))
	require.Equal(t, "duplicate", a.Body["status"])
	require.Zero(t, calls.Load())

	// The erasure is in the audit log (a refused replay is not), with
	// neither the body nor its fields.
	entries, err := audit.List(ctx, b.pool, nil)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, "message.forget", entries[0].Action)
	require.Equal(t, "msg_forget", entries[0].ObjectID)
	require.JSONEq(t, `{"source":"payments","messages":1}`, string(entries[0].Details))
}

// TestReplayReceivedWithLostJob: a message whose job ended outside the
// worker (discarded by a leader without Wharf's workers, say) is still
// received; Replay recovers it, while a received message whose job is still
// waiting is refused.
func TestReplayReceivedWithLostJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	createEffects(t, b.pool)
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, applyEffect)
	do(t, b.signed(t, "payments", "msg_lost", []byte(`{}`), time.Now()))
	msg := onlyMessage(t, b)
	require.ErrorIs(t, b.inbox.Replay(ctx, msg.ID), inbox.ErrNotReplayable, "its job is still available")

	_, err := b.pool.Exec(ctx, "UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE kind LIKE 'wharf_inbox_process%'")
	require.NoError(t, err)
	require.NoError(t, b.inbox.Replay(ctx, msg.ID))
	events := b.startWorkers(t)
	awaitJob(t, events, river.EventKindJobCompleted)
	require.Equal(t, 1, effectCount(t, b.pool, "msg_lost"))
	require.Equal(t, inbox.StatusProcessed, onlyMessage(t, b).Status)
}

// TestReplayKeepsTheQueue: an Inbox configured differently (the CLI's,
// with defaults) replays onto the queue the application works.
func TestReplayKeepsTheQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, &setupOpts{cfg: &inbox.Config{Queue: "hooks", MaxAttempts: 1}})
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(context.Context, pgx.Tx, *inbox.Message) error {
		return errors.New("boom")
	})
	events := b.startWorkers(t)
	do(t, b.signed(t, "payments", "msg_queue", []byte(`{}`), time.Now()))
	awaitJob(t, events, river.EventKindJobFailed)
	msg := onlyMessage(t, b)
	require.Equal(t, inbox.StatusDead, msg.Status)

	cliInbox, err := inbox.New(b.pool, nil)
	require.NoError(t, err)
	require.NoError(t, cliInbox.Replay(ctx, msg.ID))
	var queue string
	require.NoError(t, b.pool.QueryRow(ctx,
		"SELECT queue FROM river_job WHERE id = (SELECT job_id FROM wharf_inbox_messages WHERE id = $1)", msg.ID).Scan(&queue))
	require.Equal(t, "hooks", queue)
}

// The …Tx reads and ForgetTx work in the caller's transaction: GetTx sees a
// message received in it before the commit, and a rolled-back ForgetTx
// erases nothing.
func TestTxMethodsUseTheirTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	res, err := b.inbox.ReceiveTx(ctx, tx, inbox.Incoming{Source: "payments", EventID: "evt_tx", Body: []byte(`{"n":1}`)})
	require.NoError(t, err)
	got, err := b.inbox.GetTx(ctx, tx, res.MessageID)
	require.NoError(t, err)
	require.Equal(t, "evt_tx", got.EventID)
	_, err = b.inbox.Get(ctx, res.MessageID)
	require.ErrorIs(t, err, inbox.ErrNotFound, "not committed yet")
	require.NoError(t, tx.Commit(ctx))

	tx, err = b.pool.Begin(ctx)
	require.NoError(t, err)
	n, err := b.inbox.ForgetTx(ctx, tx, "payments", "evt_tx")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	erased, err := b.inbox.GetTx(ctx, tx, res.MessageID)
	require.NoError(t, err)
	require.Empty(t, erased.Body)
	require.NoError(t, tx.Rollback(ctx))

	kept, err := b.inbox.Get(ctx, res.MessageID)
	require.NoError(t, err)
	require.JSONEq(t, `{"n":1}`, string(kept.Body), "the rollback undid the erasure")
	_, err = b.inbox.ForgetTx(ctx, mustBegin(t, b), "payments", "evt_none")
	require.ErrorIs(t, err, inbox.ErrNotFound)
}

func mustBegin(t *testing.T, b *testBundle) pgx.Tx {
	t.Helper()
	tx, err := b.pool.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}
