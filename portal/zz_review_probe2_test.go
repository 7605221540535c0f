package portal_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/audit"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/portal"
)

// An endpoint answering 410 Gone is disabled by the outbox: is it in the audit log?
func TestZZAutoDisableAudit(t *testing.T) {
	f := newFixture(t, nil)
	acme := token(t, "acme", false)
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) }))
	defer gone.Close()
	id := f.call(t, acme, "POST", "/endpoints", map[string]any{"url": gone.URL + "/h"}).json(t)["id"].(string)
	f.publish(t, &outbox.Event{Type: "a.b", Tenant: "acme", Data: map[string]int{"x": 1}})
	deadline := time.Now().Add(20 * time.Second)
	for {
		ep := f.call(t, acme, "GET", "/endpoints/"+id, nil).json(t)
		if ep["disabled"] == true {
			t.Logf("disabled: %v", ep["disabled_reason"])
			break
		}
		require.True(t, time.Now().Before(deadline))
		time.Sleep(50 * time.Millisecond)
	}
	log := f.call(t, acme, "GET", "/audit-log", nil)
	t.Logf("audit: %s", log.body)
	require.Contains(t, string(log.body), "endpoint.disable")
}

// EndpointRecover cancelled after its first batch committed writes no audit entry.
func TestZZRecoverCancelNoAudit(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	start := time.Now().Add(-time.Minute)
	events := make([]*outbox.Event, 8000)
	for i := range events {
		events[i] = &outbox.Event{Type: "a.b", Tenant: "acme", Data: map[string]int{"i": i}}
	}
	f.publish(t, events...)
	ep, err := f.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: "https://example.com/b", Tenant: "acme"})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := f.outbox.EndpointRecover(rctx, ep.ID, start)
		done <- err
	}()
	var n int
	for {
		require.NoError(t, f.pool.QueryRow(ctx, "SELECT count(*) FROM wharf_outbox_deliveries WHERE endpoint_id = $1", ep.ID).Scan(&n))
		if n >= 1000 {
			cancel()
			break
		}
		select {
		case err := <-done:
			t.Fatalf("finished before cancel: %v", err)
		default:
		}
		time.Sleep(time.Millisecond)
	}
	err = <-done
	t.Logf("recover err: %v", err)
	require.NoError(t, f.pool.QueryRow(ctx, "SELECT count(*) FROM wharf_outbox_deliveries WHERE endpoint_id = $1", ep.ID).Scan(&n))
	entries, err := audit.List(ctx, f.pool, &audit.ListParams{ObjectID: ep.ID.String()})
	require.NoError(t, err)
	var actions []string
	for _, e := range entries {
		actions = append(actions, e.Action)
	}
	t.Logf("deliveries committed: %d, audit actions: %v", n, actions)
	require.True(t, errors.Is(err, context.Canceled) || err == nil)
	require.Contains(t, actions, "endpoint.recover")
}

func TestZZSubSecondToken(t *testing.T) {
	f := newFixture(t, nil)
	var expired atomic.Int32
	for i := 0; i < 10; i++ {
		tok, err := portal.NewToken(testKey, portal.Token{Tenant: "acme", Expires: time.Now().Add(300 * time.Millisecond)})
		require.NoError(t, err)
		if got := f.call(t, tok, "GET", "/endpoints", nil); got.status == 401 {
			expired.Add(1)
		}
	}
	t.Logf("tokens minted with 300ms TTL refused at once: %d/10", expired.Load())
}

func TestZZAuthenticateOnly(t *testing.T) {
	f := newFixture(t, nil)
	h, err := portal.New(&portal.Config{Outbox: f.outbox, Pool: f.pool, Logger: quiet(),
		Authenticate: func(r *http.Request) (string, error) {
			if c, err := r.Cookie("app"); err == nil {
				return c.Value, nil
			}
			return "", portal.ErrUnauthenticated
		}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string, hdr map[string]string) int {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.AddCookie(&http.Cookie{Name: "app", Value: "acme"})
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := zzNoRedirect().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	t.Logf("page with app session: %d", get("/", nil))
	t.Logf("page with app session and ?token=x: %d", get("/?token=x", nil))
	t.Logf("page with app session and Authorization: Basic: %d", get("/", map[string]string{"Authorization": "Basic dTpw"}))
	t.Logf("api with app session and Authorization: Basic: %d", get("/api/v1/endpoints", map[string]string{"Authorization": "Basic dTpw"}))
	t.Logf("api lower-case bearer: %d", get("/api/v1/endpoints", map[string]string{"Authorization": "bearer " + token(t, "acme", false)}))
	// CSRF via API write with Authenticate cookie and text/plain
	req, _ := http.NewRequest("POST", srv.URL+"/api/v1/endpoints", strings.NewReader(`{"url":"https://e.example.com/"}`))
	req.AddCookie(&http.Cookie{Name: "app", Value: "acme"})
	req.Header.Set("Content-Type", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	t.Logf("api write text/plain via cookie: %d", resp.StatusCode)
	// cross-site JSON write w/ Sec-Fetch-Site
	req, _ = http.NewRequest("DELETE", srv.URL+"/api/v1/endpoints/"+uuid.NewString(), nil)
	req.Header.Set("Authorization", "Bearer "+token(t, "acme", false))
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	b := make([]byte, 200)
	n, _ := resp.Body.Read(b)
	resp.Body.Close()
	t.Logf("cross-site bearer DELETE: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), b[:n])
}
