package inbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/telemetrytest"
	"github.com/wharfhq/wharf/signature"
)

// The request counter matches the HTTP answers exactly, by source and
// result, under a concurrent storm of duplicates, bad signatures, unknown
// sources, oversized and malformed bodies and wrong methods.
func TestRequestMetricsMatchTheAnswers(t *testing.T) {
	t.Parallel()
	metrics := telemetrytest.NewMetrics(t)
	verifier := signature.NewStandardWebhooks(signature.Secrets{testSecret}, nil)
	b := setup(t, &setupOpts{cfg: &inbox.Config{
		MeterProvider: metrics.Provider,
		Sources: []inbox.Source{
			{Name: "payments", Verifier: verifier, MaxBodyBytes: 2048},
			{Name: "strict", Verifier: verifier, OnMismatch: inbox.MismatchConflict},
		},
	}})

	kinds := []string{"event", "event", "event", "conflict", "badsig", "unknown", "large", "notjson", "get"}
	var mu sync.Mutex
	answers := map[string]int64{}
	var wg sync.WaitGroup
	var failure error
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 18 {
				kind := kinds[(w+i)%len(kinds)]
				label, err := sendKind(b, kind, (w*7+i)%40)
				mu.Lock()
				if err != nil && failure == nil {
					failure = err
				}
				answers[label]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.NoError(t, failure)
	for _, want := range []string{"payments/accepted", "payments/duplicate", "strict/conflict", "payments/bad_signature",
		"_unknown/unknown_source", "payments/too_large", "payments/malformed", "payments/method"} {
		require.Positive(t, answers[want], "the storm produced no %s answer: %v", want, answers)
	}
	got := telemetrytest.SumBy(t, metrics.Collect(t)["wharf_inbox_requests"], "source", "result")
	require.Equal(t, answers, got)
}

// sendKind sends one request of a kind and returns "source/result" as the
// answer says it (what the metrics must count).
func sendKind(b *testBundle, kind string, n int) (string, error) {
	source, id := "payments", fmt.Sprintf("evt_%d", n)
	body := []byte(fmt.Sprintf(`{"type":"a","n":%d}`, n))
	method := http.MethodPost
	sign := true
	switch kind {
	case "conflict":
		source, id = "strict", fmt.Sprintf("evt_c%d", n%3)
		body = []byte(fmt.Sprintf(`{"type":"a","n":%d}`, n)) // same id, payloads differ
	case "badsig":
		sign = false
	case "unknown":
		source = fmt.Sprintf("attacker-%d", n) // never a label value
	case "large":
		body = []byte(`{"pad":"` + strings.Repeat("x", 4096) + `"}`)
	case "notjson":
		body = []byte("not json")
	case "get":
		method = http.MethodGet
	}
	req, err := http.NewRequest(method, b.server.URL+"/webhooks/"+source, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	if sign {
		h, err := signature.SignStandardWebhooks([]string{testSecret}, id, time.Now(), body)
		if err != nil {
			return "", err
		}
		for k, v := range h {
			req.Header[k] = v
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var parsed map[string]any
	_ = json.Unmarshal(raw, &parsed)
	label := func(src, result string) (string, error) { return src + "/" + result, nil }
	switch resp.StatusCode {
	case http.StatusOK:
		return label(source, fmt.Sprint(parsed["status"]))
	case http.StatusConflict:
		return label(source, "conflict")
	case http.StatusUnauthorized:
		return label(source, "bad_signature")
	case http.StatusNotFound:
		return label("_unknown", "unknown_source")
	case http.StatusRequestEntityTooLarge:
		return label(source, "too_large")
	case http.StatusBadRequest:
		return label(source, "malformed")
	case http.StatusMethodNotAllowed:
		return label(source, "method")
	case http.StatusServiceUnavailable:
		return label(source, "unavailable")
	}
	return "", fmt.Errorf("unexpected answer %d: %s", resp.StatusCode, raw)
}

// The database gauges and the handler counters: a dead message shows in
// wharf_inbox_dead_messages, outcomes are counted by status.
func TestProcessingMetrics(t *testing.T) {
	t.Parallel()
	metrics := telemetrytest.NewMetrics(t)
	var deadMu sync.Mutex
	var deadIDs []string
	b := setup(t, &setupOpts{cfg: &inbox.Config{MeterProvider: metrics.Provider, OnDead: func(_ context.Context, msg *inbox.Message, cause error) {
		deadMu.Lock()
		defer deadMu.Unlock()
		deadIDs = append(deadIDs, msg.EventID+": "+cause.Error())
		if len(deadIDs) == 1 {
			panic("a hook that panics is recovered")
		}
	}}})
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if msg.EventID == "evt_bad" {
			return inbox.Permanent(errors.New("bad"))
		}
		return nil
	})
	receiveMany(t, b.pool, b.inbox, payments("evt_ok1", "evt_ok2", "evt_bad"))
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed, inbox.StatusDead)

	// A message is counted after its transaction has committed.
	data := metrics.CollectWhen(t, "every outcome counted", func(data map[string]metricdata.Aggregation) bool {
		return maps.Equal(telemetrytest.Sum(data["wharf_inbox_messages_handled"], "source", "status"),
			map[string]int64{"payments/processed": 2, "payments/dead": 1}) &&
			telemetrytest.Count(data["wharf_inbox_processing_lag"]) == 2
	})
	require.Equal(t, map[string]int64{"payments/processed": 2, "payments/dead": 1},
		telemetrytest.SumBy(t, data["wharf_inbox_messages_handled"], "source", "status"))
	require.Equal(t, map[string]int64{"payments": 1}, telemetrytest.GaugeBy(t, data["wharf_inbox_dead_messages"], "source"))
	lag, ok := data["wharf_inbox_processing_lag"].(metricdata.Histogram[float64])
	require.True(t, ok)
	require.EqualValues(t, 2, lag.DataPoints[0].Count)
	require.Eventually(t, func() bool { // OnDead runs after the count
		deadMu.Lock()
		defer deadMu.Unlock()
		return len(deadIDs) > 0
	}, 10*time.Second, 5*time.Millisecond)
	deadMu.Lock()
	defer deadMu.Unlock()
	require.Equal(t, []string{"evt_bad: permanent: bad"}, deadIDs, "OnDead once per dead message")
}
