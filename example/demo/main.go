// Command demo drives the example app the way a webhook provider would and
// prints a report. `make demo` runs it with a DATABASE_URL.
//
// It builds and starts ./example on a free port, sends signed payment
// events, repeats some deliveries, sends one event concurrently many times,
// sends a few forged, stale and malformed requests, waits for the balances
// to reach the expected sums, and stops the app with SIGTERM. It exits
// non-zero when any answer or balance is not what the contract promises.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wharfhq/wharf/signature"
)

const devSecret = "whsec_ZGV2LXNlY3JldC1mb3Itd2hhcmYtZXhhbXBsZS1wYXltZW50cw==" // example.DevSecret

var accounts = []string{"acct_1", "acct_2", "acct_3"}

func main() {
	if err := demo(); err != nil {
		fmt.Fprintln(os.Stderr, "demo: FAILED:", err)
		os.Exit(1)
	}
}

type tally struct {
	mu                                               sync.Mutex
	sent, accepted, duplicates, rejected, unexpected int
	problems                                         []string
}

func (t *tally) record(want string, status int, body map[string]any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent++
	got := fmt.Sprint(status)
	if status == http.StatusOK {
		got = fmt.Sprint(body["status"])
	}
	switch got {
	case "accepted":
		t.accepted++
	case "duplicate":
		t.duplicates++
	default:
		if status >= 400 && status < 500 {
			t.rejected++
		}
	}
	if got != want {
		t.unexpected++
		t.problems = append(t.problems, fmt.Sprintf("wanted %s, got %s %v", want, got, body))
	}
}

func demo() error {
	if os.Getenv("DATABASE_URL") == "" {
		return errors.New("DATABASE_URL is not set (run `make demo`)")
	}
	app, base, err := startApp()
	if err != nil {
		return err
	}
	defer app.stop()

	rc, err := startReceiver()
	if err != nil {
		return err
	}
	defer rc.server.Close()
	status, ep := postJSON(base+"/endpoints", fmt.Sprintf(`{"url":%q,"event_types":["balance.updated"],"description":"wharf demo receiver"}`, rc.url))
	secret, _ := ep["secret"].(string)
	if status != http.StatusCreated || secret == "" {
		return fmt.Errorf("POST /endpoints answered %d %v", status, ep)
	}
	rc.mu.Lock()
	rc.verifier = signature.NewStandardWebhooks(signature.Secrets{secret}, nil)
	rc.mu.Unlock()
	endpointID, _ := ep["id"].(string)
	defer deleteEndpoint(base, endpointID)
	fmt.Printf("demo: receiver %s registered as endpoint %s\n", rc.url, endpointID)

	initial := map[string]int64{}
	for _, a := range accounts {
		if initial[a], err = balance(base, a); err != nil {
			return err
		}
	}

	run := fmt.Sprintf("%d", time.Now().UnixNano())
	expected := map[string]int64{}
	paymentsPerAccount := map[string]int{}
	t := &tally{}
	var events [][2]string // id, body

	// 1. Thirty distinct payments, one delivery each.
	for i := range 30 {
		account := accounts[i%len(accounts)]
		amount := int64(1 + rand.IntN(500))
		expected[account] += amount
		paymentsPerAccount[account]++
		body := fmt.Sprintf(`{"type":"payment.succeeded","data":{"account":%q,"amount":%d}}`, account, amount)
		id := fmt.Sprintf("msg_demo_%s_%d", run, i)
		events = append(events, [2]string{id, body})
		status, answer := send(base, devSecret, id, body, time.Now())
		t.record("accepted", status, answer)
	}
	// 2. The provider retries ten of them (a lost response, say).
	for _, ev := range events[:10] {
		status, answer := send(base, devSecret, ev[0], ev[1], time.Now())
		t.record("duplicate", status, answer)
	}
	// 3. One new payment delivered 20 times at once.
	concurrentID := fmt.Sprintf("msg_demo_%s_concurrent", run)
	concurrentBody := `{"type":"payment.succeeded","data":{"account":"acct_1","amount":1000}}`
	expected["acct_1"] += 1000
	paymentsPerAccount["acct_1"]++
	var wg sync.WaitGroup
	results := make(chan string, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, answer := send(base, devSecret, concurrentID, concurrentBody, time.Now())
			t.mu.Lock()
			t.sent++
			t.mu.Unlock()
			results <- fmt.Sprintf("%d %v", status, answer["status"])
		}()
	}
	wg.Wait()
	close(results)
	concurrentAccepted := 0
	for r := range results {
		switch r {
		case "200 accepted":
			concurrentAccepted++
			t.accepted++
		case "200 duplicate":
			t.duplicates++
		default:
			t.unexpected++
			t.problems = append(t.problems, "concurrent delivery answered "+r)
		}
	}
	if concurrentAccepted != 1 {
		t.problems = append(t.problems, fmt.Sprintf("concurrent deliveries: %d accepted, want 1", concurrentAccepted))
	}
	// 4. An event type the app ignores.
	status, answer := send(base, devSecret, "msg_demo_"+run+"_refund", `{"type":"refund.created","data":{"account":"acct_2","amount":99}}`, time.Now())
	t.record("accepted", status, answer)
	// 5. Forged, stale and malformed requests: rejected, nothing recorded.
	forged := "whsec_" + "Zm9yZ2VkLXNlY3JldC1mb3ItYW4tYXR0YWNrZXI=" // base64("forged-secret-for-an-attacker")
	for i := range 3 {
		status, answer = send(base, forged, fmt.Sprintf("msg_demo_%s_forged_%d", run, i),
			`{"type":"payment.succeeded","data":{"account":"acct_3","amount":1000000}}`, time.Now())
		t.record("401", status, answer)
	}
	status, answer = send(base, devSecret, "msg_demo_"+run+"_stale",
		`{"type":"payment.succeeded","data":{"account":"acct_3","amount":1000000}}`, time.Now().Add(-time.Hour))
	t.record("401", status, answer)
	status, answer = send(base, devSecret, "msg_demo_"+run+"_malformed", `{"type":"payment.succeeded",`, time.Now())
	t.record("400", status, answer)

	// 6. Payouts with Idempotency-Keys: each sent, then retried (once
	//    concurrently with itself) — applied once per key.
	payoutsSent, payoutsReplayed := 0, 0
	for i := range 5 {
		key := fmt.Sprintf("demo-%s-payout-%d", run, i)
		account := accounts[i%len(accounts)]
		amount := int64(10 + i)
		expected[account] -= amount
		body := fmt.Sprintf(`{"account":%q,"amount":%d}`, account, amount)
		var pw sync.WaitGroup
		answers := make(chan int, 3)
		for range 2 {
			pw.Add(1)
			go func() { defer pw.Done(); answers <- payout(base, key, body) }()
		}
		pw.Wait()
		answers <- payout(base, key, body) // a later retry: replayed
		close(answers)
		for status := range answers {
			payoutsSent++
			switch status {
			case http.StatusCreated:
			case http.StatusConflict: // the concurrent twin was still running
			default:
				t.problems = append(t.problems, fmt.Sprintf("payout %s answered %d", key, status))
			}
		}
		payoutsReplayed++
	}
	if status := payout(base, "", `{"account":"acct_1","amount":1}`); status != http.StatusBadRequest {
		t.problems = append(t.problems, fmt.Sprintf("payout without a key answered %d, want 400", status))
	}

	// Wait for the workers to apply everything.
	final := map[string]int64{}
	deadline := time.Now().Add(60 * time.Second)
	for {
		converged := true
		for _, a := range accounts {
			if final[a], err = balance(base, a); err != nil {
				return err
			}
			converged = converged && final[a] == initial[a]+expected[a]
		}
		if converged || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the app's public API; there is nothing to subscribe to
	}

	// Every applied payment published one balance.updated: wait for them.
	wantEvents := 0
	for _, n := range paymentsPerAccount {
		wantEvents += n
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		rc.mu.Lock()
		got := len(rc.delivered)
		rc.mu.Unlock()
		if got >= wantEvents || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // the receiver is ours, but deliveries arrive on the app's schedule
	}

	fmt.Println("== Wharf demo: inbox ==")
	fmt.Printf("sent %d, accepted %d, duplicates %d, rejected %d, unexpected answers %d\n",
		t.sent, t.accepted, t.duplicates, t.rejected, t.unexpected)
	fmt.Printf("payouts: %d requests for %d keys (concurrent twins and retries), each key applied once\n", payoutsSent, payoutsReplayed)
	ok := t.unexpected == 0 && len(t.problems) == 0
	for _, a := range accounts {
		want := initial[a] + expected[a]
		mark := "ok"
		if final[a] != want {
			mark, ok = "MISMATCH", false
		}
		fmt.Printf("balance %s: %d (was %d, %+d expected) %s\n", a, final[a], initial[a], expected[a], mark)
	}
	rc.mu.Lock()
	fmt.Println("== Wharf demo: outbox ==")
	fmt.Printf("balance.updated events delivered %d of %d, retried after a failure %d, requests %d, signatures verified %d, forged %d, redelivered %d\n",
		len(rc.delivered), wantEvents, rc.retriedSucceeded, rc.requests, rc.verified, rc.forged, rc.duplicateDelivery)
	for _, a := range accounts {
		if rc.perAccount[a] != paymentsPerAccount[a] {
			ok = false
			t.problems = append(t.problems, fmt.Sprintf("%s: %d balance.updated events, want %d", a, rc.perAccount[a], paymentsPerAccount[a]))
		}
	}
	if len(rc.delivered) != wantEvents || rc.forged != 0 || rc.retriedSucceeded != len(rc.failedOnPurpose) || rc.retriedSucceeded == 0 {
		ok = false
		t.problems = append(t.problems, "outbox deliveries incomplete, unverified or not retried")
	}
	rc.mu.Unlock()
	for _, p := range t.problems {
		fmt.Println("problem:", p)
	}
	if !ok {
		return errors.New("the app did not keep the contract")
	}
	fmt.Println("every payment and payout applied exactly once; every bad request rejected; every balance change delivered, signed and verified")
	return nil
}

func send(base, secret, id, body string, ts time.Time) (int, map[string]any) {
	req, err := http.NewRequest(http.MethodPost, base+"/webhooks/payments", strings.NewReader(body))
	if err != nil {
		return 0, map[string]any{"error": err.Error()}
	}
	h, err := signature.SignStandardWebhooks([]string{secret}, id, ts, []byte(body))
	if err != nil {
		return 0, map[string]any{"error": err.Error()}
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	return doJSON(req)
}

// postJSON posts a JSON body and decodes the JSON answer.
func postJSON(url, body string) (int, map[string]any) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, map[string]any{"error": err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	return doJSON(req)
}

// deleteEndpoint removes the demo's endpoint, so that later runs do not
// deliver to a receiver that is gone.
func deleteEndpoint(base, id string) {
	req, err := http.NewRequest(http.MethodDelete, base+"/endpoints/"+id, nil)
	if err != nil {
		return
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// payout posts a payout with an Idempotency-Key and returns the status.
func payout(base, key, body string) int {
	req, err := http.NewRequest(http.MethodPost, base+"/payouts", strings.NewReader(body))
	if err != nil {
		return 0
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	status, _ := doJSON(req)
	return status
}

func balance(base, account string) (int64, error) {
	req, err := http.NewRequest(http.MethodGet, base+"/balances/"+account, nil)
	if err != nil {
		return 0, err
	}
	status, body := doJSON(req)
	if status != http.StatusOK {
		return 0, fmt.Errorf("GET /balances/%s: %d %v", account, status, body)
	}
	n, ok := body["balance"].(float64)
	if !ok {
		return 0, fmt.Errorf("GET /balances/%s: no balance in %v", account, body)
	}
	return int64(n), nil
}

func doJSON(req *http.Request) (int, map[string]any) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, map[string]any{"error": err.Error()}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		body = map[string]any{"raw": string(raw)}
	}
	return resp.StatusCode, body
}

// receiver is the demo's webhook endpoint: it verifies every request with
// the endpoint's secret, fails the first attempt of every fourth event (so
// retries show), and counts.
type receiver struct {
	mu                sync.Mutex
	verifier          *signature.StandardWebhooks
	requests          int
	verified          int
	forged            int
	failedOnPurpose   map[string]bool
	delivered         map[string]bool
	perAccount        map[string]int
	firstAttempts     int
	server            *http.Server
	url               string
	retriedSucceeded  int
	duplicateDelivery int
}

func startReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rc := &receiver{failedOnPurpose: map[string]bool{}, delivered: map[string]bool{}, perAccount: map[string]int{}}
	rc.url = "http://" + ln.Addr().String() + "/hooks"
	rc.server = &http.Server{Handler: http.HandlerFunc(rc.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = rc.server.Serve(ln) }()
	return rc, nil
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.requests++
	if rc.verifier == nil || rc.verifier.Verify(r.Context(), &signature.Request{Header: r.Header, Body: body}) != nil {
		rc.forged++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	rc.verified++
	id := r.Header.Get(signature.HeaderWebhookID)
	if rc.delivered[id] {
		rc.duplicateDelivery++ // at-least-once: a receiver dedupes on webhook-id
		w.WriteHeader(http.StatusOK)
		return
	}
	if rc.failedOnPurpose[id] {
		rc.retriedSucceeded++ // the retry of a failed first attempt
	} else if rc.firstAttempts++; rc.firstAttempts%4 == 0 {
		rc.failedOnPurpose[id] = true
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var ev struct {
		Type string `json:"type"`
		Data struct {
			Account string `json:"account"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &ev) == nil && ev.Type == "balance.updated" {
		rc.perAccount[ev.Data.Account]++
	}
	rc.delivered[id] = true
	w.WriteHeader(http.StatusNoContent)
}

type app struct {
	cmd  *exec.Cmd
	done chan error
	log  *bytes.Buffer
}

// startApp builds ./example, starts it on a free port and waits until it
// answers.
func startApp() (*app, string, error) {
	dir, err := os.MkdirTemp("", "wharf-demo")
	if err != nil {
		return nil, "", err
	}
	bin := filepath.Join(dir, "example")
	build := exec.Command("go", "build", "-o", bin, "./example")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return nil, "", fmt.Errorf("build example: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	addr := ln.Addr().String()
	_ = ln.Close()

	a := &app{cmd: exec.Command(bin), done: make(chan error, 1), log: &bytes.Buffer{}}
	a.cmd.Env = append(os.Environ(), "WHARF_EXAMPLE_ADDR="+addr,
		"WHARF_EXAMPLE_RETRY_SCHEDULE=0s,200ms,500ms,1s", // demo-speed retries
		"WHARF_EXAMPLE_ALLOW_PRIVATE=1")                  // the receiver is on loopback
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		return nil, "", err
	}
	go func() { a.done <- a.cmd.Wait() }()
	base := "http://" + addr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		if _, err := balance(base, "acct_1"); err == nil {
			fmt.Printf("demo: example app running at %s (pid %d)\n", base, a.cmd.Process.Pid)
			return a, base, nil
		}
		select {
		case err := <-a.done:
			return nil, "", fmt.Errorf("example exited early: %v\n%s", err, a.log)
		case <-ctx.Done():
			a.stop()
			return nil, "", fmt.Errorf("example did not answer within 60s\n%s", a.log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM and waits for a graceful exit.
func (a *app) stop() {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-a.done:
		if err != nil {
			fmt.Printf("demo: example exited with %v\n%s", err, a.log)
		} else {
			fmt.Println("demo: example shut down gracefully")
		}
	case <-time.After(40 * time.Second):
		_ = a.cmd.Process.Kill()
		fmt.Println("demo: example did not stop within 40s; killed")
	}
}
