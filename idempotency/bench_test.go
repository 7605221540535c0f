package idempotency_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/idempotency"
	"github.com/wharfhq/wharf/internal/testdb"
)

// BenchmarkMiddleware measures a payout request end to end (no network)
// against a baseline handler that runs the same debit in a transaction of
// its own, without the middleware.
func BenchmarkMiddleware(b *testing.B) {
	ctx := context.Background()
	pool := testdb.New(b)
	_, err := pool.Exec(ctx, appSchema)
	require.NoError(b, err)
	body := payoutBody("acct_1", 1)

	debit := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE balances SET balance = balance - 1 WHERE account = 'acct_1'")
		return err
	}
	answer := func(w http.ResponseWriter, err error) {
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}
	ownTx := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(w, pgx.BeginFunc(r.Context(), pool, func(tx pgx.Tx) error { return debit(r.Context(), tx) }))
	})
	middlewareTx := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(w, debit(r.Context(), idempotency.Tx(r.Context())))
	})
	wrap := func(transactional bool, h http.Handler) http.Handler {
		mw, err := idempotency.New(pool, func(*http.Request) string { return "acct_1" },
			&idempotency.Config{Transactional: transactional})
		require.NoError(b, err)
		return mw.Wrap(h)
	}

	run := func(b *testing.B, h http.Handler, key func(i int) string, want int) {
		for i := 0; b.Loop(); i++ {
			req := httptest.NewRequest(http.MethodPost, "/payouts", strings.NewReader(body))
			if k := key(i); k != "" {
				req.Header.Set(idempotency.HeaderKey, k)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != want {
				b.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
		}
	}
	noKey := func(int) string { return "" }
	newKey := func(prefix string) func(int) string {
		return func(i int) string { return fmt.Sprintf("%s-%d", prefix, i) }
	}

	b.Run("BaselineOwnTx", func(b *testing.B) { run(b, ownTx, noKey, http.StatusCreated) })
	b.Run("TransactionalNewKey", func(b *testing.B) {
		run(b, wrap(true, middlewareTx), newKey(fmt.Sprint("tx", b.N)), http.StatusCreated)
	})
	b.Run("NonTransactionalNewKey", func(b *testing.B) {
		run(b, wrap(false, ownTx), newKey(fmt.Sprint("alone", b.N)), http.StatusCreated)
	})
	b.Run("Replay", func(b *testing.B) {
		h := wrap(true, middlewareTx)
		run(b, h, func(int) string { return "replayed" }, http.StatusCreated)
	})
}
