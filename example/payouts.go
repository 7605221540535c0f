package main

import (
	"encoding/json"
	"log/slog"
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/wharfhq/wharf/idempotency"
)

// payoutsHandler serves POST /payouts: {"account":"acct_1","amount":10}
// subtracts amount from the account's balance (which may go negative) and
// answers 201 {"payout_id":"po_…","account":…,"balance":…}. It requires an
// Idempotency-Key; the balance change commits in the same transaction as the
// key, so a retried request never pays out twice.
func payoutsHandler(pool *pgxpool.Pool, logger *slog.Logger, mp metric.MeterProvider) (http.Handler, error) {
	idem, err := idempotency.New(pool,
		// The example has no authentication: every client is one principal.
		// A real app returns the authenticated account here.
		func(*http.Request) string { return "example" },
		&idempotency.Config{RequireKey: true, Transactional: true, Logger: logger, MeterProvider: mp})
	if err != nil {
		return nil, err
	}
	return idem.Wrap(http.HandlerFunc(createPayout)), nil
}

func createPayout(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Account string       `json:"account"`
		Amount  *json.Number `json:"amount"`
	}
	dec := json.NewDecoder(r.Body)
	dec.UseNumber()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body must be JSON: " + err.Error()})
		return
	}
	if req.Account == "" || req.Amount == nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "account and amount are required"})
		return
	}
	amount, err := req.Amount.Int64()
	if err != nil || amount <= 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "amount must be a positive integer"})
		return
	}
	payoutID := "po_" + uuid.Must(uuid.NewV7()).String()
	tx := idempotency.Tx(r.Context()) // the key's transaction
	var balance int64
	err = tx.QueryRow(r.Context(), `INSERT INTO example_balances (account, balance) VALUES ($1, -$2::bigint)
		ON CONFLICT (account) DO UPDATE SET balance = example_balances.balance - $2::bigint
		RETURNING balance`, req.Account, amount).Scan(&balance)
	if err != nil {
		// 5xx releases the key: the client may retry.
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "database unavailable"})
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"payout_id": payoutID, "account": req.Account, "balance": balance})
}
