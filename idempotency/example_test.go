package idempotency_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/wharfhq/wharf/idempotency"
	"github.com/wharfhq/wharf/internal/testdb"
)

// A payout endpoint that requires a key and debits a balance in the same
// transaction as the key: a retried POST replays the first answer and the
// balance is debited once.
func ExampleMiddleware_Wrap() {
	ctx := context.Background()
	pool, cleanup := testdb.ForExample() // a pool on a database migrated with wharf.Migrate
	defer cleanup()
	if _, err := pool.Exec(ctx, `
		CREATE TABLE balances (account text PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO balances VALUES ('acct_1', 100)`); err != nil {
		fmt.Println(err)
		return
	}

	// Keys are scoped per principal: whoever authentication says the caller is.
	principal := func(r *http.Request) string { return r.Header.Get("X-Account") }
	idem, err := idempotency.New(pool, principal, &idempotency.Config{RequireKey: true, Transactional: true})
	if err != nil {
		fmt.Println(err)
		return
	}

	payout := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Account string `json:"account"`
			Amount  int64  `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, "malformed JSON", http.StatusBadRequest) // stored: a retry gets the same 400
			return
		}
		// The debit commits together with the key, or not at all.
		tx := idempotency.Tx(r.Context())
		var balance int64
		err := tx.QueryRow(r.Context(),
			"UPDATE balances SET balance = balance - $2 WHERE account = $1 RETURNING balance",
			in.Account, in.Amount).Scan(&balance)
		if err != nil {
			http.Error(w, "debit failed", http.StatusInternalServerError) // rolled back; the key is free
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"account": in.Account, "balance": balance})
	})

	mux := http.NewServeMux()
	mux.Handle("POST /payouts", idem.Wrap(payout))
	server := httptest.NewServer(mux)
	defer server.Close()

	post := func(key string) {
		req, _ := http.NewRequest(http.MethodPost, server.URL+"/payouts",
			strings.NewReader(`{"account":"acct_1","amount":10}`))
		req.Header.Set("X-Account", "acct_1")
		if key != "" {
			req.Header.Set(idempotency.HeaderKey, key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d replayed=%q %s", resp.StatusCode, resp.Header.Get(idempotency.HeaderReplayed), body)
	}
	post("4f0c1e36-payout-1") // runs the handler
	post("4f0c1e36-payout-1") // the client's retry: replayed, not debited again
	post("")                  // no key

	// Output:
	// 201 replayed="" {"account":"acct_1","balance":90}
	// 201 replayed="true" {"account":"acct_1","balance":90}
	// 400 replayed="" {"error":"idempotency: the Idempotency-Key header is required"}
}
