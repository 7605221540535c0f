package inbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/signature"
)

// collect reads every metric of reader into name -> data.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// sumBy returns an Int64 sum's values by the given attributes, joined by "/".
func sumBy(t *testing.T, data metricdata.Aggregation, keys ...string) map[string]int64 {
	t.Helper()
	sum, ok := data.(metricdata.Sum[int64])
	require.True(t, ok, "not an int64 sum: %T", data)
	out := map[string]int64{}
	for _, dp := range sum.DataPoints {
		var parts []string
		for _, k := range keys {
			v, _ := dp.Attributes.Value(attributeKey(k))
			parts = append(parts, v.AsString())
		}
		out[strings.Join(parts, "/")] += dp.Value
	}
	return out
}

// The request counter matches the HTTP answers exactly, by source and
// result, under a concurrent storm of duplicates, bad signatures, unknown
// sources, oversized and malformed bodies and wrong methods.
func TestRequestMetricsMatchTheAnswers(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	verifier := signature.NewStandardWebhooks(signature.Secrets{testSecret}, nil)
	b := setup(t, &setupOpts{cfg: &inbox.Config{
		MeterProvider: mp,
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
	got := sumBy(t, collect(t, reader)["wharf_inbox_requests"], "source", "result")
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
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	var deadMu sync.Mutex
	var deadIDs []string
	b := setup(t, &setupOpts{cfg: &inbox.Config{MeterProvider: mp, OnDead: func(_ context.Context, msg *inbox.Message, cause error) {
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

	data := collect(t, reader)
	require.Equal(t, map[string]int64{"payments/processed": 2, "payments/dead": 1},
		sumBy(t, data["wharf_inbox_messages_handled"], "source", "status"))
	dead, ok := data["wharf_inbox_dead_messages"].(metricdata.Gauge[int64])
	require.True(t, ok, "%T", data["wharf_inbox_dead_messages"])
	require.Len(t, dead.DataPoints, 1)
	require.EqualValues(t, 1, dead.DataPoints[0].Value)
	lag, ok := data["wharf_inbox_processing_lag"].(metricdata.Histogram[float64])
	require.True(t, ok)
	require.EqualValues(t, 2, lag.DataPoints[0].Count)
	deadMu.Lock()
	defer deadMu.Unlock()
	require.Equal(t, []string{"evt_bad: permanent: bad"}, deadIDs, "OnDead once per dead message")
}

func attributeKey(k string) attribute.Key { return attribute.Key(k) }
