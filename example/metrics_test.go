package main

import (
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/wharfhq/wharf/signature"
)

// scrape returns GET /metrics of the app at base.
func scrape(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// The example serves Wharf's metrics at GET /metrics in Prometheus's text
// format, under the contract's names.
func TestExampleServesMetrics(t *testing.T) {
	t.Parallel()
	base := startExample(t, config{})
	body := `{"type":"payment.succeeded","data":{"account":"acct_m","amount":5}}`
	h, err := signature.SignStandardWebhooks([]string{DevSecret}, "evt_metrics", time.Now(), []byte(body))
	require.NoError(t, err)
	for range 2 {
		status, _, _ := sendJSON(t, base+"/webhooks/payments", h, body)
		require.Equal(t, http.StatusOK, status)
	}
	status, _, _ := sendJSON(t, base+"/webhooks/nosuchsource", h, body)
	require.Equal(t, http.StatusNotFound, status)

	text := scrape(t, base)
	for _, want := range []string{
		`wharf_inbox_requests_total{result="accepted",source="payments"} 1`,
		`wharf_inbox_requests_total{result="duplicate",source="payments"} 1`,
		`wharf_inbox_requests_total{result="unknown_source",source="_unknown"} 1`,
		`# TYPE wharf_inbox_receive_duration_seconds histogram`,
	} {
		require.Contains(t, text, want)
	}
	require.NotContains(t, text, "nosuchsource", "an unknown source's name is never a label")
	// Processed: the balance update committed.
	require.Eventually(t, func() bool {
		return strings.Contains(scrape(t, base), `wharf_inbox_messages_handled_total{source="payments",status="processed"} 1`)
	}, 20*time.Second, 50*time.Millisecond)
}

// Every metric an alert rule in deploy/prometheus/alerts.yml reads is one
// the app exports.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../deploy/prometheus/alerts.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))

	base := startExample(t, config{AllowPrivate: true})
	// Traffic, so that every counter has a series: a webhook (processed,
	// publishing to an endpoint), a duplicate, an idempotent payout.
	status, _, _ := sendJSON(t, base+"/endpoints", nil, `{"url":"http://127.0.0.1:9/hook"}`)
	require.Equal(t, http.StatusCreated, status)
	body := `{"type":"payment.succeeded","data":{"account":"acct_a","amount":5}}`
	h, err := signature.SignStandardWebhooks([]string{DevSecret}, "evt_alerts", time.Now(), []byte(body))
	require.NoError(t, err)
	for range 2 {
		status, _, _ := sendJSON(t, base+"/webhooks/payments", h, body)
		require.Equal(t, http.StatusOK, status)
	}
	require.Eventually(t, func() bool {
		text := scrape(t, base)
		return strings.Contains(text, "wharf_outbox_attempts_total") && strings.Contains(text, "wharf_retention_partitions_deferred")
	}, 20*time.Second, 50*time.Millisecond, "the balance.updated event was attempted and the prune ran at start")
	exported := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (wharf_\w+) `).FindAllStringSubmatch(scrape(t, base), -1) {
		exported[m[1]] = true
	}
	// Gauges recorded only when there is something to report are declared
	// by the code even before: the example has no unworked queue.
	exported["wharf_unworked_queue_jobs"] = true
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			names := regexp.MustCompile(`\bwharf_\w+`).FindAllString(r.Expr, -1)
			require.NotEmpty(t, names, "%s reads no Wharf metric", r.Alert)
			for _, name := range names {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
				require.True(t, exported[base], "%s reads %s, which the app does not export (exported: %v)", r.Alert, name, exported)
			}
		}
	}
	for _, want := range []string{"WharfDuplicateRatioHigh", "WharfVolumeSpike", "WharfSourceSilent", "WharfInboxDeadMessages",
		"WharfInboxLag", "WharfEndpointDisabled"} {
		require.True(t, slices.Contains(alerts, want), "missing alert %s", want)
	}
}
