package idempotency_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/idempotency"
	"github.com/wharfhq/wharf/internal/testdb"
)

func TestRetryAfterSuccessReplays(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, transactional bool) {
		b := setup(t, testOptions{config: idempotency.Config{Transactional: transactional}})

		first := b.do(t, payoutOf("key-1"))
		require.Equal(t, http.StatusCreated, first.status, first.body)
		require.False(t, first.replayed())
		require.Equal(t, "fresh-per-response", first.header.Get("X-Trace"))
		require.Equal(t, "completed", b.keyStatus(t, "key-1"))

		for range 2 {
			again := b.do(t, payoutOf("key-1"))
			require.Equal(t, first.status, again.status)
			require.Equal(t, first.body, again.body)
			require.Equal(t, first.header.Get("Content-Type"), again.header.Get("Content-Type"))
			require.Equal(t, first.header.Get("Location"), again.header.Get("Location"))
			require.True(t, again.replayed())
			require.Empty(t, again.header.Get(idempotency.HeaderBodyOmitted), "the body was stored")
			require.Empty(t, again.header.Get("X-Trace"), "only ReplayHeaders are stored")
		}
		require.EqualValues(t, 1, b.calls.Load())
		require.EqualValues(t, 90, b.balance(t, "acct_1"))

		// The quoted form of a key (IETF draft) names the same key.
		quoted := b.do(t, payoutOf(`"key-1"`))
		require.True(t, quoted.replayed())
		require.Equal(t, first.body, quoted.body)
		require.EqualValues(t, 1, b.calls.Load())
	})
}

func TestConcurrentDuplicatesGet409WhileFirstRuns(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, transactional bool) {
		entered, release := newGate(), newGate()
		b := setup(t, testOptions{
			config: idempotency.Config{Transactional: transactional},
			gates:  []*gate{entered, release},
			// The first run writes before it waits: in transactional mode the
			// duplicates must not wait for this uncommitted work.
			handler: holdingFirstRun(entered, release),
		})

		firstDone := b.sendAsync(payoutOf("key-1"))
		entered.wait()

		for _, res := range b.sendTogether(t, 6, payoutOf("key-1")) {
			require.Equal(t, http.StatusConflict, res.status, res.body)
			require.Equal(t, "1", res.header.Get("Retry-After"))
			require.Contains(t, res.errorMessage(t), "still in progress")
		}
		require.EqualValues(t, 1, b.calls.Load(), "duplicates must not run the handler")

		release.open()
		first := <-firstDone
		require.Equal(t, http.StatusCreated, first.status, first.body)

		again := b.do(t, payoutOf("key-1"))
		require.True(t, again.replayed())
		require.Equal(t, first.body, again.body)
		require.EqualValues(t, 1, b.calls.Load())
		require.EqualValues(t, 90, b.balance(t, "acct_1"))
	})
}

func TestConcurrentBurstRunsHandlerOnce(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, transactional bool) {
		b := setup(t, testOptions{config: idempotency.Config{Transactional: transactional}})

		const requests = 10
		var original string
		var replays, conflicts int
		for _, res := range b.sendTogether(t, requests, payoutOf("burst")) {
			switch {
			case res.status == http.StatusConflict:
				conflicts++
			case res.status == http.StatusCreated && res.replayed():
				replays++
			case res.status == http.StatusCreated:
				require.Empty(t, original, "two requests ran the handler")
				original = res.body
			default:
				t.Fatalf("unexpected answer %d: %s", res.status, res.body)
			}
		}
		require.NotEmpty(t, original)
		require.Equal(t, requests-1, replays+conflicts)
		require.EqualValues(t, 1, b.calls.Load())
		require.EqualValues(t, 90, b.balance(t, "acct_1"))

		final := b.do(t, payoutOf("burst"))
		require.True(t, final.replayed())
		require.Equal(t, original, final.body)
	})
}

func TestChangedRequestIs422(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, transactional bool) {
		b := setup(t, testOptions{config: idempotency.Config{Transactional: transactional}})
		first := b.do(t, payoutOf("key-1"))
		require.Equal(t, http.StatusCreated, first.status)

		changedBody := payoutOf("key-1")
		changedBody.body = payoutBody("acct_1", 11)
		changedQuery := payoutOf("key-1")
		changedQuery.path = "/payouts?dry_run=true"
		for _, req := range []request{changedBody, changedQuery} {
			res := b.do(t, req)
			require.Equal(t, http.StatusUnprocessableEntity, res.status, res.body)
			require.Contains(t, res.errorMessage(t), "different request")
			require.False(t, res.replayed())
		}
		require.EqualValues(t, 1, b.calls.Load())
		require.EqualValues(t, 90, b.balance(t, "acct_1"))

		// The key still answers for the original request.
		again := b.do(t, payoutOf("key-1"))
		require.True(t, again.replayed())
		require.Equal(t, first.body, again.body)
	})
}

func TestFailedRunReleasesKey(t *testing.T) {
	t.Parallel()
	answer := func(status int) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) { http.Error(w, "not now", status) }
	}
	failures := []struct {
		name   string
		status int // 0: the handler panics
		fail   func(w http.ResponseWriter)
	}{
		{"ServerError", http.StatusBadGateway, answer(http.StatusBadGateway)},
		{"Panic", 0, func(http.ResponseWriter) { panic("handler bug after its write") }},
		// Transient 4xx answers are released like 5xx, not stored.
		{"RequestTimeout", http.StatusRequestTimeout, answer(http.StatusRequestTimeout)},
		{"TooEarly", http.StatusTooEarly, answer(http.StatusTooEarly)},
		{"TooManyRequests", http.StatusTooManyRequests, answer(http.StatusTooManyRequests)},
	}
	for _, failure := range failures {
		t.Run(failure.name, func(t *testing.T) {
			t.Parallel()
			modes(t, func(t *testing.T, transactional bool) {
				var failed atomic.Bool
				b := setup(t, testOptions{
					config: idempotency.Config{Transactional: transactional},
					handler: func(b *testBundle) http.HandlerFunc {
						return func(w http.ResponseWriter, r *http.Request) {
							in, balance, ok := b.debitOrFail(w, r)
							if ok && failed.CompareAndSwap(false, true) {
								failure.fail(w) // after the write
								return
							}
							if ok {
								b.created(w, in.Account, balance)
							}
						}
					},
				})

				res, err := b.send(payoutOf("key-1"))
				if failure.status == 0 {
					require.Error(t, err, "net/http drops the connection of a panicking handler")
				} else {
					require.NoError(t, err)
					require.Equal(t, failure.status, res.status, "the handler's own answer is sent")
					require.False(t, res.replayed())
				}
				require.Empty(t, b.keyStatus(t, "key-1"), "the failed run must release the key")

				res = b.do(t, payoutOf("key-1"))
				require.Equal(t, http.StatusCreated, res.status, res.body)
				require.False(t, res.replayed(), "the retry must run the handler")
				require.EqualValues(t, 2, b.calls.Load())
				if transactional {
					require.EqualValues(t, 90, b.balance(t, "acct_1"), "the failed run's debit must roll back")
				} else {
					// Nothing undoes a non-transactional handler's own writes:
					// the reason transactional mode exists.
					require.EqualValues(t, 80, b.balance(t, "acct_1"))
				}
			})
		})
	}
}

func TestClientErrorIsStored(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, transactional bool) {
		b := setup(t, testOptions{
			config: idempotency.Config{Transactional: transactional},
			handler: func(b *testBundle) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusPaymentRequired)
					_, _ = w.Write([]byte(`{"error":"card declined"}`))
				}
			},
		})
		first := b.do(t, payoutOf("key-1"))
		require.Equal(t, http.StatusPaymentRequired, first.status)
		again := b.do(t, payoutOf("key-1"))
		require.Equal(t, http.StatusPaymentRequired, again.status)
		require.Equal(t, first.body, again.body)
		require.True(t, again.replayed())
		require.EqualValues(t, 1, b.calls.Load())
	})
}

func TestMissingKey(t *testing.T) {
	t.Parallel()

	t.Run("RequiredIs400", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testOptions{config: idempotency.Config{RequireKey: true, Transactional: true}})
		res := b.do(t, request{account: "acct_1", body: payoutBody("acct_1", 10)})
		require.Equal(t, http.StatusBadRequest, res.status)
		require.Equal(t, "idempotency: the Idempotency-Key header is required", res.errorMessage(t))
		require.Zero(t, b.calls.Load())
		require.EqualValues(t, 100, b.balance(t, "acct_1"))
	})

	t.Run("OptionalPassesThrough", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testOptions{})
		for range 2 {
			res := b.do(t, request{account: "acct_1", body: payoutBody("acct_1", 10)})
			require.Equal(t, http.StatusCreated, res.status)
			require.Equal(t, "fresh-per-response", res.header.Get("X-Trace"))
		}
		require.EqualValues(t, 2, b.calls.Load())
		require.EqualValues(t, 80, b.balance(t, "acct_1"))
		require.Zero(t, b.keyCount(t))
	})

	t.Run("OptionalTransactionalStillGetsTx", func(t *testing.T) {
		t.Parallel()
		var sawTx atomic.Bool
		b := setup(t, testOptions{
			config: idempotency.Config{Transactional: true},
			handler: func(b *testBundle) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					sawTx.Store(idempotency.Tx(r.Context()) != nil)
					if _, _, err := b.debit(r); err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
					http.Error(w, "fails after its write", http.StatusBadGateway)
				}
			},
		})
		res := b.do(t, request{account: "acct_1", body: payoutBody("acct_1", 10)})
		require.Equal(t, http.StatusBadGateway, res.status)
		require.True(t, sawTx.Load())
		require.EqualValues(t, 100, b.balance(t, "acct_1"), "a 5xx rolls the keyless transaction back")
		require.Zero(t, b.keyCount(t))
	})

	t.Run("OtherMethodsPassThroughWithKey", func(t *testing.T) {
		t.Parallel()
		var sawTx atomic.Bool
		b := setup(t, testOptions{
			config: idempotency.Config{RequireKey: true, Transactional: true},
			handler: func(b *testBundle) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					sawTx.Store(idempotency.Tx(r.Context()) != nil)
					w.WriteHeader(http.StatusOK)
				}
			},
		})
		for _, keys := range [][]string{nil, {"key-1"}} {
			res := b.do(t, request{method: http.MethodGet, account: "acct_1", keys: keys})
			require.Equal(t, http.StatusOK, res.status)
		}
		require.EqualValues(t, 2, b.calls.Load())
		require.False(t, sawTx.Load())
		require.Zero(t, b.keyCount(t))
	})
}

func TestMalformedKeyIs400(t *testing.T) {
	t.Parallel()
	b := setup(t, testOptions{config: idempotency.Config{Transactional: true}})
	tests := []struct {
		name string
		keys []string
		want string
	}{
		{"Empty", []string{""}, "invalid Idempotency-Key"},
		{"EmptyQuoted", []string{`""`}, "invalid Idempotency-Key"},
		{"TooLong", []string{strings.Repeat("k", idempotency.MaxKeyLength+1)}, "invalid Idempotency-Key"},
		{"InnerSpace", []string{"two words"}, "invalid Idempotency-Key"},
		{"NonASCII", []string{"clé"}, "invalid Idempotency-Key"},
		{"UnbalancedQuote", []string{`"abc`}, "invalid Idempotency-Key"},
		{"Repeated", []string{"a", "b"}, "more than one Idempotency-Key"},
	}
	for _, tt := range tests {
		res := b.do(t, request{account: "acct_1", keys: tt.keys, body: payoutBody("acct_1", 10)})
		require.Equal(t, http.StatusBadRequest, res.status, tt.name)
		require.Contains(t, res.errorMessage(t), tt.want, tt.name)
	}
	require.Zero(t, b.calls.Load())
	require.Zero(t, b.keyCount(t))
	require.EqualValues(t, 100, b.balance(t, "acct_1"))

	longest := strings.Repeat("k", idempotency.MaxKeyLength)
	res := b.do(t, payoutOf(longest))
	require.Equal(t, http.StatusCreated, res.status, res.body)
}

func TestKeysAreScopedByPrincipalAndRoute(t *testing.T) {
	t.Parallel()
	b := setup(t, testOptions{config: idempotency.Config{Transactional: true}})
	body := payoutBody("acct_1", 10)

	asAcct1 := b.do(t, request{account: "acct_1", keys: []string{"shared"}, body: body})
	asAcct2 := b.do(t, request{account: "acct_2", keys: []string{"shared"}, body: body})
	onRefunds := b.do(t, request{path: "/refunds", account: "acct_1", keys: []string{"shared"}, body: body})
	for _, res := range []result{asAcct1, asAcct2, onRefunds} {
		require.Equal(t, http.StatusCreated, res.status, res.body)
		require.False(t, res.replayed())
	}
	require.EqualValues(t, 3, b.calls.Load())
	require.NotEqual(t, asAcct1.body, asAcct2.body)
	require.Equal(t, 3, b.keyCount(t))

	// Each scope replays its own response.
	require.Equal(t, asAcct2.body, b.do(t, request{account: "acct_2", keys: []string{"shared"}, body: body}).body)
	require.Equal(t, onRefunds.body, b.do(t, request{path: "/refunds", account: "acct_1", keys: []string{"shared"}, body: body}).body)
	require.EqualValues(t, 3, b.calls.Load())

	var routes []string
	rows, err := b.pool.Query(context.Background(), "SELECT DISTINCT route FROM wharf_idempotency_keys ORDER BY route")
	require.NoError(t, err)
	for rows.Next() {
		var route string
		require.NoError(t, rows.Scan(&route))
		routes = append(routes, route)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"POST /payouts", "POST /refunds"}, routes, "routes default to the ServeMux pattern")

	t.Run("NoPrincipalIs401", func(t *testing.T) {
		res := b.do(t, request{keys: []string{"shared"}, body: body})
		require.Equal(t, http.StatusUnauthorized, res.status)
		require.Contains(t, res.errorMessage(t), "no principal")
		require.EqualValues(t, 3, b.calls.Load())
	})
}

func TestExpiredKeyIsNew(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, transactional bool) {
		b := setup(t, testOptions{config: idempotency.Config{Transactional: transactional, KeyRetention: time.Hour}})
		require.Equal(t, http.StatusCreated, b.do(t, payoutOf("key-1")).status)

		changed := payoutOf("key-1")
		changed.body = payoutBody("acct_1", 25)
		b.age(t, "key-1", time.Hour-time.Second)
		require.Equal(t, http.StatusUnprocessableEntity, b.do(t, changed).status, "not expired yet")

		b.age(t, "key-1", time.Second)
		res := b.do(t, changed)
		require.Equal(t, http.StatusCreated, res.status, res.body)
		require.False(t, res.replayed())
		require.EqualValues(t, 2, b.calls.Load())
		require.EqualValues(t, 65, b.balance(t, "acct_1"))
		require.True(t, b.do(t, changed).replayed(), "the reclaimed key stores the new response")
	})
}

func TestStuckKeyIsTakenOverAfterTimeout(t *testing.T) {
	t.Parallel()
	// In-process: the first request is still running (not dead) when the
	// timeout passes, which is why InProgressTimeout must exceed the longest
	// handler. The late first request must not overwrite the new outcome.
	entered, release := newGate(), newGate()
	b := setup(t, testOptions{
		config:  idempotency.Config{InProgressTimeout: time.Minute},
		gates:   []*gate{entered, release},
		handler: holdingFirstRun(entered, release),
	})
	firstDone := b.sendAsync(payoutOf("key-1"))
	entered.wait()

	b.age(t, "key-1", time.Minute-time.Second)
	require.Equal(t, http.StatusConflict, b.do(t, payoutOf("key-1")).status)

	b.age(t, "key-1", time.Second)
	second := b.do(t, payoutOf("key-1"))
	require.Equal(t, http.StatusCreated, second.status, second.body)
	require.False(t, second.replayed())
	require.Contains(t, b.logs.String(), "taking over a key left in progress")

	release.open()
	first := <-firstDone
	require.Equal(t, http.StatusCreated, first.status, "the first handler's answer is still sent")
	require.Contains(t, b.logs.String(), "claim lost while the handler ran")

	again := b.do(t, payoutOf("key-1"))
	require.True(t, again.replayed())
	require.Equal(t, second.body, again.body, "the takeover's outcome is the one kept")
}

func TestBodyLimits(t *testing.T) {
	t.Parallel()

	t.Run("RequestTooLargeIs413", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testOptions{config: idempotency.Config{MaxRequestBody: 64}})
		req := payoutOf("key-1")
		req.body = payoutBody("acct_1", 10) + strings.Repeat(" ", 64)
		res := b.do(t, req)
		require.Equal(t, http.StatusRequestEntityTooLarge, res.status)
		require.Contains(t, res.errorMessage(t), "larger than 64 bytes")
		require.Zero(t, b.calls.Load())
		require.Zero(t, b.keyCount(t))
	})

	t.Run("LargeResponseReplaysWithoutBody", func(t *testing.T) {
		t.Parallel()
		big := strings.Repeat("x", 100)
		b := setup(t, testOptions{
			config: idempotency.Config{MaxStoredResponseBody: 99, Transactional: true},
			handler: func(b *testBundle) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/plain")
					w.WriteHeader(http.StatusAccepted)
					_, _ = w.Write([]byte(big))
				}
			},
		})
		first := b.do(t, payoutOf("key-1"))
		require.Equal(t, http.StatusAccepted, first.status)
		require.Equal(t, big, first.body, "the live response is sent whole")
		again := b.do(t, payoutOf("key-1"))
		require.Equal(t, http.StatusAccepted, again.status)
		require.True(t, again.replayed())
		require.Equal(t, "true", again.header.Get(idempotency.HeaderBodyOmitted))
		require.Equal(t, "text/plain", again.header.Get("Content-Type"))
		require.Empty(t, again.body)
		require.EqualValues(t, 1, b.calls.Load())
	})
}

func TestDatabaseUnavailableIs503(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, transactional bool) {
		b := setup(t, testOptions{config: idempotency.Config{Transactional: transactional}})
		b.pool.Close()
		res := b.do(t, payoutOf("key-1"))
		require.Equal(t, http.StatusServiceUnavailable, res.status)
		require.Contains(t, res.errorMessage(t), "database is unavailable")
		require.Zero(t, b.calls.Load())
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)

	_, err := idempotency.New(nil, accountPrincipal, nil)
	require.ErrorContains(t, err, "pool is nil")
	_, err = idempotency.New(pool, nil, nil)
	require.ErrorContains(t, err, "principal is nil")
	mw, err := idempotency.New(pool, accountPrincipal, nil)
	require.NoError(t, err)
	require.NotNil(t, mw)

	tests := []struct {
		name   string
		config idempotency.Config
		want   string
	}{
		{"EmptyMethods", idempotency.Config{Methods: []string{}}, "Config.Methods is empty"},
		{"LowerCaseMethod", idempotency.Config{Methods: []string{"post"}}, `"post" is not an upper-case HTTP method`},
		{"NegativeRetention", idempotency.Config{KeyRetention: -time.Second}, "Config.KeyRetention is negative"},
		{"NegativeTimeout", idempotency.Config{InProgressTimeout: -time.Second}, "Config.InProgressTimeout is negative"},
		{"NegativeRetryAfter", idempotency.Config{RetryAfter: -time.Second}, "Config.RetryAfter is negative"},
		{"RequestLimit", idempotency.Config{MaxRequestBody: -2}, "Config.MaxRequestBody is -2"},
		{"ResponseLimit", idempotency.Config{MaxStoredResponseBody: -2}, "Config.MaxStoredResponseBody is -2"},
		{"BufferLimit", idempotency.Config{MaxBufferedResponseBody: -2}, "Config.MaxBufferedResponseBody is -2"},
		{"StoredAboveBuffered", idempotency.Config{MaxStoredResponseBody: 2 << 20},
			"Config.MaxStoredResponseBody (2097152) exceeds Config.MaxBufferedResponseBody (1048576)"},
		{"StoredUnlimitedBufferedNot", idempotency.Config{MaxStoredResponseBody: -1, MaxBufferedResponseBody: 1 << 30},
			"Config.MaxStoredResponseBody (-1) exceeds Config.MaxBufferedResponseBody (1073741824)"},
		{"HeaderName", idempotency.Config{ReplayHeaders: []string{"Bad Header"}}, `"Bad Header" is not a header name`},
		{"RetentionNotAboveTimeout", idempotency.Config{KeyRetention: time.Minute, InProgressTimeout: time.Minute},
			"KeyRetention (1m0s) must be longer than Config.InProgressTimeout (1m0s)"},
		{"RetentionBelowDefaultTimeout", idempotency.Config{KeyRetention: time.Minute}, "must be longer than Config.InProgressTimeout (5m0s)"},
		{"TimeoutAboveDefaultRetention", idempotency.Config{InProgressTimeout: 48 * time.Hour}, "KeyRetention (24h0m0s) must be longer"},
	}
	for _, tt := range tests {
		_, err := idempotency.New(pool, accountPrincipal, &tt.config)
		require.ErrorContains(t, err, tt.want, tt.name)
		require.ErrorIs(t, err, idempotency.ErrInvalidConfig, tt.name)
		require.ErrorIs(t, tt.config.Validate(), idempotency.ErrInvalidConfig, tt.name)
	}
	// Every problem at once.
	err = (&idempotency.Config{Methods: []string{"post"}, RetryAfter: -time.Second, ReplayHeaders: []string{"Bad Header"}}).Validate()
	require.ErrorContains(t, err, `"post" is not an upper-case HTTP method`)
	require.ErrorContains(t, err, "Config.RetryAfter is negative")
	require.ErrorContains(t, err, `"Bad Header" is not a header name`)
	require.NoError(t, (*idempotency.Config)(nil).Validate())

	_, err = idempotency.New(pool, accountPrincipal, &idempotency.Config{MaxStoredResponseBody: -1, MaxBufferedResponseBody: -1})
	require.NoError(t, err, "no limit on either")

	// A transactional claim is never committed in progress: no constraint.
	_, err = idempotency.New(pool, accountPrincipal, &idempotency.Config{Transactional: true, KeyRetention: time.Minute})
	require.NoError(t, err)
}

// TestFailedRecordingIsRetried checks that in non-transactional mode a
// failure to record the response is retried: a key left in progress would
// make retries wait, then run the handler a second time after
// InProgressTimeout.
func TestFailedRecordingIsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	entered, locked := newGate(), newGate()
	b := setup(t, testOptions{
		// The first try to record waits for the row lock the test holds,
		// and gives up after lock_timeout. The test then has until the
		// last try gives up (50 ms + 500 + 250 + 500 after the first
		// failure's log) to release the lock.
		runtimeParams: map[string]string{"lock_timeout": "500ms"},
		gates:         []*gate{entered, locked},
		handler: func(b *testBundle) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				in, balance, ok := b.debitOrFail(w, r)
				if !ok {
					return
				}
				entered.open()
				locked.wait()
				b.created(w, in.Account, balance)
			}
		},
	})
	firstDone := b.sendAsync(payoutOf("key-1"))

	// While the handler runs, lock the claimed key's row so that recording
	// its response fails once.
	entered.wait()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var status string
	require.NoError(t, tx.QueryRow(ctx,
		"SELECT status FROM wharf_idempotency_keys WHERE idempotency_key = 'key-1' FOR UPDATE").Scan(&status))
	require.Equal(t, "in_progress", status)
	locked.open()
	require.Eventually(t, func() bool {
		return strings.Contains(b.logs.String(), "recording the response failed; retrying")
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, tx.Commit(ctx))

	first := <-firstDone
	require.Equal(t, http.StatusCreated, first.status, first.body)
	require.Equal(t, "completed", b.keyStatus(t, "key-1"), "the retry recorded the response")
	require.NotContains(t, b.logs.String(), "response not recorded")

	again := b.do(t, payoutOf("key-1"))
	require.Equal(t, http.StatusCreated, again.status, again.body)
	require.True(t, again.replayed())
	require.Equal(t, first.body, again.body)
	require.EqualValues(t, 1, b.calls.Load())
	require.EqualValues(t, 90, b.balance(t, "acct_1"))
}
