package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/portal"
	"github.com/wharfhq/wharf/signature"
)

// startExample runs the example in-process against a fresh database and
// returns its base URL once it answers. It shuts down gracefully when the
// test ends.
func startExample(t testing.TB, cfg config) string {
	base, _ := startExampleDB(t, cfg)
	return base
}

// startExampleDB is startExample that also returns the database URL (cfg's
// when set, else a fresh test database's).
func startExampleDB(t testing.TB, cfg config) (string, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg.DatabaseURL = cmp.Or(cfg.DatabaseURL, testdb.NewURL(t))
	cfg.Secret = cmp.Or(cfg.Secret, DevSecret)
	cfg.StripeSecret = cmp.Or(cfg.StripeSecret, DevStripeSecret)
	cfg.GitHubSecret = cmp.Or(cfg.GitHubSecret, DevGitHubSecret)
	go func() { done <- run(ctx, cfg, ln, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done, "graceful shutdown")
	})
	base := "http://" + ln.Addr().String()
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/balances/acct_0")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, 30*time.Second, 20*time.Millisecond)
	return base, cfg.DatabaseURL
}

// sendJSON posts body with headers and decodes the JSON answer.
func sendJSON(t *testing.T, url string, header http.Header, body string) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var answer map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&answer))
	return resp.StatusCode, answer, resp.Header
}

// TestExampleContract checks the contract that outside checks rely on.
func TestExampleContract(t *testing.T) {
	t.Parallel()
	base := startExample(t, config{})

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
		h, err := signature.SignStandardWebhooks([]string{secret}, id, time.Now(), []byte(body))
		require.NoError(t, err)
		status, answer, _ := sendJSON(t, base+"/webhooks/payments", h, body)
		return status, answer
	}

	// An unknown account has balance 0.
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
		h := http.Header{}
		if key != "" {
			h.Set("Idempotency-Key", key)
		}
		return sendJSON(t, base+"/payouts", h, body)
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

// TestExampleProviders: Stripe- and GitHub-signed events are stored, deduped
// on the provider's own id and answered like /webhooks/payments.
func TestExampleProviders(t *testing.T) {
	t.Parallel()
	base := startExample(t, config{})

	stripeBody := `{"id":"evt_1","type":"invoice.paid","data":{"object":{}}}`
	stripeHeader, err := signature.SignStripe([]string{DevStripeSecret}, time.Now(), []byte(stripeBody))
	require.NoError(t, err)
	status, answer, _ := sendJSON(t, base+"/webhooks/stripe", stripeHeader, stripeBody)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, map[string]any{"status": "accepted", "event_id": "evt_1"}, answer)
	status, answer, _ = sendJSON(t, base+"/webhooks/stripe", stripeHeader, stripeBody)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "duplicate", answer["status"])
	forged, err := signature.SignStripe([]string{"whsec_not_the_secret"}, time.Now(), []byte(stripeBody))
	require.NoError(t, err)
	status, answer, _ = sendJSON(t, base+"/webhooks/stripe", forged, stripeBody)
	require.Equal(t, http.StatusUnauthorized, status)
	require.NotEmpty(t, answer["error"])

	githubBody := `{"action":"opened","number":1}`
	mac := hmac.New(sha256.New, []byte(DevGitHubSecret))
	mac.Write([]byte(githubBody))
	githubHeader := http.Header{}
	githubHeader.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	githubHeader.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	githubHeader.Set("X-GitHub-Event", "pull_request")
	status, answer, _ = sendJSON(t, base+"/webhooks/github", githubHeader, githubBody)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, map[string]any{"status": "accepted", "event_id": "72d3162e-cc78-11e3-81ab-4c9367dc0958"}, answer)
	status, answer, _ = sendJSON(t, base+"/webhooks/github", githubHeader, githubBody)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "duplicate", answer["status"])
	githubHeader.Set("X-Hub-Signature-256", "sha256="+strings.Repeat("0", 64))
	status, _, _ = sendJSON(t, base+"/webhooks/github", githubHeader, githubBody)
	require.Equal(t, http.StatusUnauthorized, status)
}

// TestExampleOutbox: a payment publishes balance.updated in its
// transaction; a registered endpoint receives it signed with its secret, and
// the SSRF guard refuses loopback unless allowed.
func TestExampleOutbox(t *testing.T) {
	t.Parallel()
	received := make(chan *http.Request, 10)
	bodies := make(chan []byte, 10)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		received <- r
		bodies <- body
	}))
	t.Cleanup(sink.Close)

	base := startExample(t, config{AllowPrivate: true, RetrySchedule: []time.Duration{0, 100 * time.Millisecond}})
	status, endpoint, _ := sendJSON(t, base+"/endpoints", nil, `{"url":"`+sink.URL+`","event_types":["balance.updated"]}`)
	require.Equal(t, http.StatusCreated, status, endpoint)
	require.NotEmpty(t, endpoint["id"])
	secret, _ := endpoint["secret"].(string)
	require.True(t, strings.HasPrefix(secret, "whsec_"), secret)

	status, answer, _ := sendJSON(t, base+"/endpoints", nil, `{"url":"not a url"}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.NotEmpty(t, answer["error"])

	payment := `{"type":"payment.succeeded","data":{"account":"acct_9","amount":40}}`
	h, err := signature.SignStandardWebhooks([]string{DevSecret}, "msg_out_1", time.Now(), []byte(payment))
	require.NoError(t, err)
	status, _, _ = sendJSON(t, base+"/webhooks/payments", h, payment)
	require.Equal(t, http.StatusOK, status)

	select {
	case r := <-received:
		body := <-bodies
		verifier := signature.NewStandardWebhooks(signature.Secrets{secret}, nil)
		require.NoError(t, verifier.Verify(context.Background(), &signature.Request{Header: r.Header, Body: body}))
		var event struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		require.NoError(t, json.Unmarshal(body, &event))
		require.Equal(t, "balance.updated", event.Type)
		require.Equal(t, map[string]any{"account": "acct_9", "balance": float64(40)}, event.Data)
	case <-time.After(20 * time.Second):
		t.Fatal("balance.updated was not delivered within 20s")
	}
}

// TestExampleSSRFGuardOnByDefault: without WHARF_EXAMPLE_ALLOW_PRIVATE a
// loopback endpoint is registered but never reached.
func TestExampleSSRFGuardOnByDefault(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	sink := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(sink.Close)
	base := startExample(t, config{RetrySchedule: []time.Duration{0}})
	// A loopback endpoint is refused when it is registered, saying which
	// switch allows it (WHARF_EXAMPLE_ALLOW_PRIVATE=1 sets it here).
	status, answer, _ := sendJSON(t, base+"/endpoints", nil, `{"url":"`+sink.URL+`","event_types":["balance.updated"]}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, answer["error"], "set Config.AllowPrivateNetworks")
	require.Zero(t, hits.Load())
}

// TestExamplePortal: with a portal key, an account manages its own
// endpoint through the tenant API and receives its own balance.updated
// events, and no other account's.
func TestExamplePortal(t *testing.T) {
	t.Parallel()
	received := make(chan []byte, 10)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		received <- body
	}))
	t.Cleanup(sink.Close)
	key := bytes.Repeat([]byte("e"), 32)
	base := startExample(t, config{AllowPrivate: true, PortalKey: key})

	tok, err := portal.NewToken(key, portal.Token{Tenant: "acct_7", Expires: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	status, ep, _ := sendJSON(t, base+"/portal/api/v1/endpoints", http.Header{"Authorization": {"Bearer " + tok}, "Content-Type": {"application/json"}},
		`{"url":"`+sink.URL+`","event_types":["balance.updated"]}`)
	require.Equal(t, http.StatusCreated, status, ep)

	for i, account := range []string{"acct_8", "acct_7"} {
		payment := `{"type":"payment.succeeded","data":{"account":"` + account + `","amount":5}}`
		h, err := signature.SignStandardWebhooks([]string{DevSecret}, fmt.Sprintf("msg_portal_%d", i), time.Now(), []byte(payment))
		require.NoError(t, err)
		status, _, _ = sendJSON(t, base+"/webhooks/payments", h, payment)
		require.Equal(t, http.StatusOK, status)
	}
	select {
	case body := <-received:
		require.Contains(t, string(body), `"account":"acct_7"`)
	case <-time.After(20 * time.Second):
		t.Fatal("acct_7's balance.updated was not delivered within 20s")
	}
	// acct_8's payment is applied (its event published), and acct_7's
	// endpoint has one delivery: its own.
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/balances/acct_8")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body map[string]any
		return json.NewDecoder(resp.Body).Decode(&body) == nil && body["balance"] == float64(5)
	}, 20*time.Second, 20*time.Millisecond)
	req, err := http.NewRequest(http.MethodGet, base+"/portal/api/v1/deliveries", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var page struct{ Data []map[string]any }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	require.Len(t, page.Data, 1)
	require.Equal(t, "balance.updated", page.Data[0]["event_type"])
}
