package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/signature"
)

// TestExampleContract runs the example in-process against a fresh database
// and checks the contract that outside checks rely on.
func TestExampleContract(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := config{DatabaseURL: testdb.NewURL(t), Secret: DevSecret}
	go func() { done <- run(ctx, cfg, ln, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done, "graceful shutdown")
	})
	base := "http://" + ln.Addr().String()

	get := func(account string) map[string]any {
		resp, err := http.Get(base + "/balances/" + account)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var body map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return body
	}
	post := func(secret, id, body string) (int, map[string]any) {
		req, err := http.NewRequest(http.MethodPost, base+"/webhooks/payments", strings.NewReader(body))
		require.NoError(t, err)
		h, err := signature.SignStandardWebhooks([]string{secret}, id, time.Now(), []byte(body))
		require.NoError(t, err)
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var answer map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&answer))
		return resp.StatusCode, answer
	}

	// The server answers once migrated; an unknown account has balance 0.
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/balances/acct_1")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, map[string]any{"account": "acct_1", "balance": float64(0)}, get("acct_1"))

	payment := `{"type":"payment.succeeded","data":{"account":"acct_1","amount":125}}`
	status, answer := post(DevSecret, "msg_1", payment)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "accepted", answer["status"])
	status, answer = post(DevSecret, "msg_1", payment)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "duplicate", answer["status"])
	status, _ = post(DevSecret, "msg_2", `{"type":"customer.created","data":{}}`)
	require.Equal(t, http.StatusOK, status)
	status, answer = post("whsec_Zm9yZ2VkLXNlY3JldA==", "msg_3", payment)
	require.Equal(t, http.StatusUnauthorized, status)
	require.NotEmpty(t, answer["error"])

	require.Eventually(t, func() bool { return get("acct_1")["balance"] == float64(125) }, 20*time.Second, 20*time.Millisecond)

	// Payouts need an Idempotency-Key and apply once per key.
	payout := func(key, body string) (int, map[string]any, http.Header) {
		req, err := http.NewRequest(http.MethodPost, base+"/payouts", strings.NewReader(body))
		require.NoError(t, err)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var answer map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&answer))
		return resp.StatusCode, answer, resp.Header
	}
	status, answer, _ = payout("", `{"account":"acct_1","amount":10}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.NotEmpty(t, answer["error"])
	status, first, _ := payout("key-1", `{"account":"acct_1","amount":10}`)
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, "acct_1", first["account"])
	require.Equal(t, float64(115), first["balance"])
	require.True(t, strings.HasPrefix(first["payout_id"].(string), "po_"))
	status, again, header := payout("key-1", `{"account":"acct_1","amount":10}`)
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, first, again)
	require.Equal(t, "true", header.Get("Idempotent-Replayed"))
	status, _, _ = payout("key-1", `{"account":"acct_1","amount":20}`)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	status, _, _ = payout("key-2", `{"account":"acct_1","amount":200}`)
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, float64(-85), get("acct_1")["balance"], "balances may go negative")
}
