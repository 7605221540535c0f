package portal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/audit"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/portal"
)

func zzNoRedirect() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// Open redirect through the link login.
func TestZZOpenRedirect(t *testing.T) {
	f := newFixture(t, nil)
	tok := token(t, "attacker", false)
	for _, p := range []string{
		"/portal/endpoints/..%2F..%2F..%2F%5Cevil.com",
		"/portal/endpoints/..%2F..%2F..%2F%2Fevil.com",
		"/portal/endpoints/%5C%5Cevil.com",
		"/portal/deliveries/..%2F..%2F..%2F%5Cevil.com",
	} {
		req, _ := http.NewRequest("GET", f.server.URL+p+"?token="+tok, nil)
		resp, err := zzNoRedirect().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		t.Logf("prefix=/portal %s -> %d Location=%q", p, resp.StatusCode, resp.Header.Get("Location"))
	}
	// Prefix "" served at the root.
	ob := f.outbox
	h, err := portal.New(&portal.Config{Outbox: ob, Pool: f.pool, Keys: [][]byte{testKey}, Logger: quiet()})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, p := range []string{
		"/endpoints/..%2F..%2F%5Cevil.com",
		"/endpoints/..%2F%5Cevil.com",
	} {
		req, _ := http.NewRequest("GET", srv.URL+p+"?token="+tok, nil)
		resp, err := zzNoRedirect().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		t.Logf("prefix='' %s -> %d Location=%q", p, resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestZZRecoverZeroSince(t *testing.T) {
	f := newFixture(t, nil)
	acme := token(t, "acme", false)
	created := f.call(t, acme, "POST", "/endpoints", map[string]any{"url": "https://example.com/x"})
	require.Equal(t, 201, created.status, string(created.body))
	id := created.json(t)["id"].(string)
	got := f.call(t, acme, "POST", "/endpoints/"+id+"/recover", map[string]any{"since": "0001-01-01T00:00:00Z"})
	t.Logf("since zero: %d %s", got.status, got.body)
	require.NotEqual(t, 500, got.status)
}

func TestZZDeliveryFilterNUL(t *testing.T) {
	f := newFixture(t, nil)
	acme := token(t, "acme", false)
	for _, q := range []string{"event_type=%00", "event_type=%FF", "since=2020-01-01T00:00:00Z&cursor=abc", "limit=-1", "limit=99999999999999999999"} {
		got := f.call(t, acme, "GET", "/deliveries?"+q, nil)
		t.Logf("%s: %d %s", q, got.status, got.body)
	}
	got := f.call(t, acme, "GET", "/deliveries?event_type=%00", nil)
	require.NotEqual(t, 500, got.status)
}

type zzRequireID struct{}

func (zzRequireID) Validate(data json.RawMessage) error {
	var m map[string]any
	if json.Unmarshal(data, &m) != nil || m["id"] == nil {
		return &outbox.SchemaViolation{Pointer: "", Message: "missing property id"}
	}
	return nil
}

func TestZZTestEventNoExample(t *testing.T) {
	f := newFixture(t, &outbox.Catalog{Types: []outbox.EventType{
		{Name: "invoice.paid", Description: "paid", Schema: json.RawMessage(`{"required":["id"]}`)},
	}, Compile: func(json.RawMessage) (outbox.SchemaValidator, error) { return zzRequireID{}, nil }})
	acme := token(t, "acme", false)
	created := f.call(t, acme, "POST", "/endpoints", map[string]any{"url": "https://example.com/x"})
	require.Equal(t, 201, created.status, string(created.body))
	id := created.json(t)["id"].(string)
	got := f.call(t, acme, "POST", "/endpoints/"+id+"/test", nil)
	t.Logf("test without body: %d %s", got.status, got.body)
	got2 := f.call(t, acme, "POST", "/endpoints/"+id+"/test", map[string]any{"event_type": "invoice.paid"})
	t.Logf("test with type: %d %s", got2.status, got2.body)
	require.Equal(t, 202, got.status)
}

// A test event sent to endpoint A is later recovered to endpoint B.
func TestZZRecoverLeaksTargetedEvent(t *testing.T) {
	f := newFixture(t, nil)
	acme := token(t, "acme", false)
	start := time.Now().Add(-time.Minute)
	a := f.call(t, acme, "POST", "/endpoints", map[string]any{"url": "https://example.com/a"}).json(t)["id"].(string)
	got := f.call(t, acme, "POST", "/endpoints/"+a+"/test", nil)
	require.Equal(t, 202, got.status, string(got.body))
	b := f.call(t, acme, "POST", "/endpoints", map[string]any{"url": "https://example.com/b"}).json(t)["id"].(string)
	rec := f.call(t, acme, "POST", "/endpoints/"+b+"/recover", map[string]any{"since": start.UTC().Format(time.RFC3339)})
	t.Logf("recover B: %d %s", rec.status, rec.body)
	list := f.call(t, acme, "GET", "/deliveries?endpoint_id="+b, nil)
	t.Logf("B deliveries: %s", list.body)
	require.Equal(t, `{"deliveries":0}`, strings.TrimSpace(string(rec.body)))
}

func TestZZPatchNulls(t *testing.T) {
	f := newFixture(t, nil)
	acme := token(t, "acme", false)
	created := f.call(t, acme, "POST", "/endpoints", map[string]any{"url": "https://example.com/x", "event_types": []string{"a.b"}})
	id := created.json(t)["id"].(string)
	for _, body := range []string{`{"event_types": null}`, `{"url": null}`, `{"disabled": null}`, `{"event_types": [null]}`, `{"event_types": [1]}`, `{"url": 5}`, `[]`, `null`, `{"description": "x\u0000y"}`, `{"url":"https://a.example/"} {"x":1}`, `{}`} {
		got := f.call(t, acme, "PATCH", "/endpoints/"+id, body)
		t.Logf("PATCH %s: %d %s", body, got.status, strings.TrimSpace(string(got.body)))
	}
	for _, body := range []string{`null`, `{"url": null}`, `{"url": "https://example.com/y", "event_types": null}`, `{"url":"https://example.com/y","description":null}`} {
		got := f.call(t, acme, "POST", "/endpoints", body)
		t.Logf("POST %s: %d %s", body, got.status, strings.TrimSpace(string(got.body)))
	}
	for _, body := range []string{`null`, `{"since": null}`, `{"since": "2020-01-01"}`, `{"since": "9999-12-31T23:59:59Z"}`, `{"since": "-0001-01-01T00:00:00Z"}`} {
		got := f.call(t, acme, "POST", "/endpoints/"+id+"/recover", body)
		t.Logf("recover %s: %d %s", body, got.status, strings.TrimSpace(string(got.body)))
	}
	for _, body := range []string{`null`, `{"event_type": null}`, `{"event_type": "nope"}`, `{"event_type": 1}`} {
		got := f.call(t, acme, "POST", "/endpoints/"+id+"/test", body)
		t.Logf("test %s: %d %s", body, got.status, strings.TrimSpace(string(got.body)))
	}
	big := `{"description":"` + strings.Repeat("a", 70000) + `"}`
	got := f.call(t, acme, "PATCH", "/endpoints/"+id, big)
	t.Logf("big: %d %s", got.status, got.body)
	// audit
	entries, err := audit.List(context.Background(), f.pool, nil)
	require.NoError(t, err)
	for _, e := range entries {
		t.Logf("audit %s %s %s %s", e.Action, e.Actor.Kind, e.Tenant, e.Details)
	}
}

// Read-only reveals the secret on pages.
func TestZZReadOnlyPageSecret(t *testing.T) {
	f := newFixture(t, nil)
	acme := token(t, "acme", false)
	id := f.call(t, acme, "POST", "/endpoints", map[string]any{"url": "https://example.com/x"}).json(t)["id"].(string)
	ro := token(t, "acme", true)
	req, _ := http.NewRequest("POST", f.server.URL+"/portal/endpoints/"+id+"/secret", nil)
	req.Header.Set("Authorization", "Bearer "+ro)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	t.Logf("read-only page secret: %d", resp.StatusCode)
	got := f.call(t, ro, "GET", "/endpoints/"+id+"/secret", nil)
	t.Logf("read-only api secret: %d", got.status)
	_ = fmt.Sprint
	_ = pgx.ErrNoRows
}
