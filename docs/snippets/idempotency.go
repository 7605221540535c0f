package snippets

import (
	"encoding/json"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/idempotency"
)

// payouts is the README's idempotency example.
func payouts(pool *pgxpool.Pool, mux *http.ServeMux) error {
	// readme:begin idempotency
	principal := func(r *http.Request) string { return accountID(r) } // keys are scoped per principal
	idem, err := idempotency.New(pool, principal, &idempotency.Config{
		RequireKey:    true, // 400 without an Idempotency-Key
		Transactional: true, // the handler's writes commit with the key
	})
	if err != nil {
		return err
	}

	payout := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Account string `json:"account"`
			Amount  int64  `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, "malformed JSON", http.StatusBadRequest) // 4xx: stored and replayed
			return
		}
		tx := idempotency.Tx(r.Context()) // the middleware's transaction
		var balance int64
		err := tx.QueryRow(r.Context(),
			"UPDATE balances SET balance = balance - $2 WHERE account = $1 RETURNING balance",
			in.Account, in.Amount).Scan(&balance)
		if err != nil {
			http.Error(w, "debit failed", http.StatusInternalServerError) // 5xx: rolled back, key released
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"account": in.Account, "balance": balance})
	})

	mux.Handle("POST /payouts", idem.Wrap(payout))
	// readme:end
	return nil
}

// accountID stands for the app's own authentication: the account the
// request is authenticated as.
func accountID(r *http.Request) string { return r.Header.Get("X-Account") }
