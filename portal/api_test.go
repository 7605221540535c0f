package portal_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/audit"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/portal"
	"github.com/wharfhq/wharf/signature"
)

// awaitStatus polls a delivery through the API until it has status.
func (f *fixture) awaitStatus(t *testing.T, tok, id, status string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := f.call(t, tok, "GET", "/deliveries/"+id, nil)
		require.Equal(t, http.StatusOK, got.status, string(got.body))
		d := got.json(t)
		if d["status"] == status {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery %s is %v, not %s, after 30s", id, d["status"], status)
		}
		time.Sleep(20 * time.Millisecond) // polling an HTTP API: there is nothing to wait on
	}
}

// TestTenantUsesTheAPI is the API's acceptance: a tenant, with only its
// token, creates an endpoint for its server, receives its account's
// events signed with the secret the API returned, sees each attempt,
// replays one and gets the same webhook-id again; another tenant sees none
// of it.
func TestTenantUsesTheAPI(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	acme, globex := token(t, "acme", false), token(t, "globex", false)
	server := newReceiver(t)

	created := f.call(t, acme, "POST", "/endpoints", map[string]any{"url": server.server.URL + "/hooks", "description": "prod", "event_types": []string{"balance.*"}})
	require.Equal(t, http.StatusCreated, created.status, string(created.body))
	ep := created.json(t)
	secret, _ := ep["secret"].(string)
	require.True(t, strings.HasPrefix(secret, "whsec_"))
	id := ep["id"].(string)
	require.Equal(t, false, ep["disabled"])
	require.Equal(t, []any{"balance.*"}, ep["event_types"])

	// Another tenant's events, and acme's other types, do not reach it.
	f.publish(t,
		&outbox.Event{Type: "balance.updated", Tenant: "globex", Data: map[string]int{"balance": 1}},
		&outbox.Event{Type: "invoice.paid", Tenant: "acme", Data: map[string]int{"cents": 1}},
	)
	mine := f.publish(t, &outbox.Event{Type: "balance.updated", Tenant: "acme", Data: map[string]int{"balance": 2}})
	reqs, bodies := server.await(t, 1)
	require.Len(t, reqs, 1)
	verifier := signature.NewStandardWebhooks(signature.Secrets{secret}, nil)
	require.NoError(t, verifier.Verify(context.Background(), &signature.Request{Method: "POST", Header: reqs[0].Header, Body: bodies[0]}))
	require.Equal(t, mine[0].EventID, reqs[0].Header.Get("webhook-id"))

	list := f.call(t, acme, "GET", "/deliveries?endpoint_id="+id, nil)
	require.Equal(t, http.StatusOK, list.status, string(list.body))
	data := list.json(t)["data"].([]any)
	require.Len(t, data, 1)
	first := data[0].(map[string]any)
	require.Equal(t, mine[0].EventID, first["webhook_id"])
	require.Equal(t, "balance.updated", first["event_type"])
	deliveryID := first["id"].(string)

	detail := f.awaitStatus(t, acme, deliveryID, "succeeded")
	log := detail["attempt_log"].([]any)
	require.Len(t, log, 1)
	require.Equal(t, float64(200), log[0].(map[string]any)["status_code"])

	replayed := f.call(t, acme, "POST", "/deliveries/"+deliveryID+"/replay", nil)
	require.Equal(t, http.StatusAccepted, replayed.status, string(replayed.body))
	reqs, _ = server.await(t, 2)
	require.Equal(t, mine[0].EventID, reqs[1].Header.Get("webhook-id"))
	detail = f.awaitStatus(t, acme, deliveryID, "succeeded")
	require.Len(t, detail["attempt_log"].([]any), 2)

	// The other tenant sees none of it: 404 for every id, empty lists.
	for _, probe := range []struct{ method, path string }{
		{"GET", "/endpoints/" + id},
		{"PATCH", "/endpoints/" + id},
		{"DELETE", "/endpoints/" + id},
		{"GET", "/endpoints/" + id + "/secret"},
		{"POST", "/endpoints/" + id + "/rotate-secret"},
		{"POST", "/endpoints/" + id + "/test"},
		{"POST", "/endpoints/" + id + "/recover"},
		{"GET", "/deliveries/" + deliveryID},
		{"POST", "/deliveries/" + deliveryID + "/replay"},
		{"GET", "/deliveries?endpoint_id=" + id},
	} {
		var body any
		switch probe.method {
		case "PATCH":
			body = map[string]any{"description": "mine now"}
		case "POST":
			body = map[string]any{}
			if strings.HasSuffix(probe.path, "/recover") {
				body = map[string]any{"since": time.Now().Add(-time.Hour)}
			}
		}
		got := f.call(t, globex, probe.method, probe.path, body)
		require.Equal(t, http.StatusNotFound, got.status, "%s %s: %s", probe.method, probe.path, got.body)
	}
	for _, path := range []string{"/endpoints", "/deliveries"} {
		got := f.call(t, globex, "GET", path, nil)
		require.Equal(t, http.StatusOK, got.status)
		require.Empty(t, got.json(t)["data"], path)
	}
	// Untouched by those attempts.
	got := f.call(t, acme, "GET", "/endpoints/"+id, nil).json(t)
	require.Equal(t, "prod", got["description"])
	require.Len(t, server.got, 2)
}

func TestEndpointLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	acme := token(t, "acme", false)
	server := newReceiver(t)
	ep := f.call(t, acme, "POST", "/endpoints", map[string]any{"url": server.server.URL}).json(t)
	id := ep["id"].(string)
	require.Equal(t, []any{}, ep["event_types"])

	patched := f.call(t, acme, "PATCH", "/endpoints/"+id, map[string]any{"description": "staging", "disabled": true})
	require.Equal(t, http.StatusOK, patched.status, string(patched.body))
	require.Equal(t, true, patched.json(t)["disabled"])
	require.Equal(t, "staging", patched.json(t)["description"])

	// A disabled endpoint gets no test event.
	test := f.call(t, acme, "POST", "/endpoints/"+id+"/test", nil)
	require.Equal(t, http.StatusConflict, test.status, string(test.body))
	enabled := f.call(t, acme, "PATCH", "/endpoints/"+id, map[string]any{"disabled": false})
	require.Equal(t, false, enabled.json(t)["disabled"])

	test = f.call(t, acme, "POST", "/endpoints/"+id+"/test", nil)
	require.Equal(t, http.StatusAccepted, test.status, string(test.body))
	reqs, bodies := server.await(t, 1)
	require.Equal(t, test.json(t)["event_id"], reqs[0].Header.Get("webhook-id"))
	require.Contains(t, string(bodies[0]), `"type":"wharf.test"`)

	secret := f.call(t, acme, "GET", "/endpoints/"+id+"/secret", nil).json(t)["secret"]
	rotated := f.call(t, acme, "POST", "/endpoints/"+id+"/rotate-secret", nil)
	require.Equal(t, http.StatusOK, rotated.status, string(rotated.body))
	newSecret := rotated.json(t)["secret"]
	require.NotEqual(t, secret, newSecret)
	require.Equal(t, newSecret, f.call(t, acme, "GET", "/endpoints/"+id+"/secret", nil).json(t)["secret"])

	recovered := f.call(t, acme, "POST", "/endpoints/"+id+"/recover", map[string]any{"since": time.Now().Add(-time.Hour)})
	require.Equal(t, http.StatusAccepted, recovered.status, string(recovered.body))
	require.Equal(t, float64(0), recovered.json(t)["deliveries"], "the test event has its delivery already")

	require.Equal(t, http.StatusNoContent, f.call(t, acme, "DELETE", "/endpoints/"+id, nil).status)
	require.Equal(t, http.StatusNotFound, f.call(t, acme, "GET", "/endpoints/"+id, nil).status)
}

func TestEndpointPaging(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	acme := token(t, "acme", false)
	for i := range 5 {
		got := f.call(t, acme, "POST", "/endpoints", map[string]any{"url": fmt.Sprintf("https://example.com/%d", i)})
		require.Equal(t, http.StatusCreated, got.status)
	}
	seen := map[string]bool{}
	path := "/endpoints?limit=2"
	pages := 0
	for {
		page := f.call(t, acme, "GET", path, nil).json(t)
		pages++
		for _, e := range page["data"].([]any) {
			seen[e.(map[string]any)["url"].(string)] = true
		}
		next, _ := page["next_cursor"].(string)
		if next == "" {
			require.Nil(t, page["next_cursor"])
			break
		}
		path = "/endpoints?limit=2&cursor=" + next
	}
	require.Equal(t, 3, pages)
	require.Len(t, seen, 5)
	require.Equal(t, http.StatusBadRequest, f.call(t, acme, "GET", "/endpoints?cursor=nope", nil).status)
	require.Equal(t, http.StatusBadRequest, f.call(t, acme, "GET", "/endpoints?limit=0", nil).status)
}

func TestAPIErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	acme := token(t, "acme", false)

	for name, tc := range map[string]struct {
		tok, method, path string
		body              any
		status            int
		field             string
	}{
		"no token":           {"", "GET", "/endpoints", nil, 401, ""},
		"garbage token":      {"wpt_x.y", "GET", "/endpoints", nil, 401, ""},
		"malformed JSON":     {acme, "POST", "/endpoints", `{"url":`, 400, ""},
		"two values":         {acme, "POST", "/endpoints", `{"url":"https://a.example"} {}`, 400, ""},
		"no body":            {acme, "POST", "/endpoints", "", 400, ""},
		"missing url":        {acme, "POST", "/endpoints", map[string]any{"description": "x"}, 422, "url"},
		"bad url":            {acme, "POST", "/endpoints", map[string]any{"url": "ftp://x"}, 422, "url"},
		"metadata url":       {acme, "POST", "/endpoints", map[string]any{"url": "http://169.254.169.254/"}, 422, "url"},
		"unknown field":      {acme, "POST", "/endpoints", map[string]any{"url": "https://a.example", "tenant": "globex"}, 422, "tenant"},
		"wrong type":         {acme, "POST", "/endpoints", map[string]any{"url": 5}, 422, "url"},
		"bad filter":         {acme, "POST", "/endpoints", map[string]any{"url": "https://a.example", "event_types": []string{"a b"}}, 422, "event_types"},
		"bad data filter":    {acme, "POST", "/endpoints", map[string]any{"url": "https://a.example", "data_filter": []int{1}}, 422, "data_filter"},
		"bad id":             {acme, "GET", "/endpoints/123", nil, 404, ""},
		"unknown id":         {acme, "GET", "/deliveries/0196b8a4-0000-7000-8000-000000000000", nil, 404, ""},
		"bad status":         {acme, "GET", "/deliveries?status=lost", nil, 400, "status"},
		"bad since":          {acme, "GET", "/deliveries?since=yesterday", nil, 400, "since"},
		"recover w/o since":  {acme, "POST", "/endpoints/0196b8a4-0000-7000-8000-000000000000/recover", map[string]any{}, 422, "since"},
		"recover zero since": {acme, "POST", "/endpoints/0196b8a4-0000-7000-8000-000000000000/recover", map[string]any{"since": "0001-01-01T00:00:00Z"}, 422, "since"},
		"event type NUL":     {acme, "GET", "/deliveries?event_type=%00", nil, 400, "event_type"},
		"body not object":    {acme, "POST", "/endpoints", `[]`, 400, ""},
		"unknown path":       {acme, "GET", "/nope", nil, 404, ""},
		"too large":          {acme, "POST", "/endpoints", map[string]any{"url": "https://a.example", "description": strings.Repeat("x", 70<<10)}, 413, ""},
	} {
		got := f.call(t, tc.tok, tc.method, tc.path, tc.body)
		require.Equal(t, tc.status, got.status, "%s: %s", name, got.body)
		body := got.json(t)
		require.NotEmpty(t, body["error"], name)
		if tc.field != "" {
			require.Equal(t, tc.field, body["field"], name)
		} else {
			require.NotContains(t, body, "field", name)
		}
	}
	list := f.call(t, acme, "GET", "/endpoints", nil).json(t)
	require.Empty(t, list["data"], "no refused request created anything")
}

func TestTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	readOnly := token(t, "acme", true)
	require.Equal(t, http.StatusOK, f.call(t, readOnly, "GET", "/endpoints", nil).status)
	got := f.call(t, readOnly, "POST", "/endpoints", map[string]any{"url": "https://a.example"})
	require.Equal(t, http.StatusForbidden, got.status)
	// Nor may it read a signing secret, with which it could forge webhooks.
	id := f.call(t, token(t, "acme", false), "POST", "/endpoints", map[string]any{"url": "https://a.example"}).json(t)["id"].(string)
	require.Equal(t, http.StatusForbidden, f.call(t, readOnly, "GET", "/endpoints/"+id+"/secret", nil).status)
	_, err := portal.NewToken(testKey, portal.Token{Tenant: "acme", Expires: time.Now().Add(300 * time.Millisecond)})
	require.Error(t, err, "a token would be dead on arrival")

	otherKey, err := portal.NewToken([]byte(strings.Repeat("o", 32)), portal.Token{Tenant: "acme", Expires: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, f.call(t, otherKey, "GET", "/endpoints", nil).status)

	// Expired: mint one that expires at once and wait for its second to pass.
	expires := time.Now().Add(1100 * time.Millisecond)
	short, err := portal.NewToken(testKey, portal.Token{Tenant: "acme", Expires: expires})
	require.NoError(t, err)
	deadline := expires.Add(100 * time.Millisecond)
	time.Sleep(time.Until(deadline)) // the token's expiry is a time, not an event
	require.Equal(t, http.StatusUnauthorized, f.call(t, short, "GET", "/endpoints", nil).status)

	// A tampered payload fails its signature.
	good := token(t, "acme", false)
	_, sig, _ := strings.Cut(strings.TrimPrefix(good, "wpt_"), ".")
	claims := base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(`{"tenant":"globex","exp":%d}`, time.Now().Add(time.Hour).Unix())))
	tampered := "wpt_" + claims + "." + sig
	require.Equal(t, http.StatusUnauthorized, f.call(t, tampered, "GET", "/endpoints", nil).status)

	_, err = portal.NewToken([]byte("short"), portal.Token{Tenant: "acme", Expires: time.Now().Add(time.Hour)})
	require.ErrorIs(t, err, portal.ErrInvalidKey)
	_, err = portal.NewToken(testKey, portal.Token{Tenant: "", Expires: time.Now().Add(time.Hour)})
	require.Error(t, err)
	_, err = portal.NewToken(testKey, portal.Token{Tenant: "acme", Expires: time.Now().Add(portal.MaxTokenTTL + time.Hour)})
	require.Error(t, err)
}

func TestCatalogThroughTheAPI(t *testing.T) {
	t.Parallel()
	f := newFixture(t, &outbox.Catalog{Strict: true, Types: []outbox.EventType{
		{Name: "balance.updated", Description: "A balance changed.", Example: json.RawMessage(`{"balance":42}`)},
		{Name: "invoice.paid", Description: "An invoice was paid."},
	}})
	acme := token(t, "acme", false)
	all := f.call(t, acme, "GET", "/event-types", nil).json(t)["data"].([]any)
	var types []any
	for _, typ := range all {
		if !strings.HasPrefix(typ.(map[string]any)["name"].(string), "wharf.") { // the operational ones come too
			types = append(types, typ)
		}
	}
	require.Len(t, all, len(types)+6)
	require.Len(t, types, 2)
	require.Equal(t, "balance.updated", types[0].(map[string]any)["name"])
	require.Equal(t, map[string]any{"balance": float64(42)}, types[0].(map[string]any)["example"])

	bad := f.call(t, acme, "POST", "/endpoints", map[string]any{"url": "https://a.example", "event_types": []string{"balance.updatd"}})
	require.Equal(t, http.StatusUnprocessableEntity, bad.status)
	require.Equal(t, "event_types", bad.json(t)["field"])

	server := newReceiver(t)
	id := f.call(t, acme, "POST", "/endpoints", map[string]any{"url": server.server.URL, "event_types": []string{"balance.*"}}).json(t)["id"].(string)
	test := f.call(t, acme, "POST", "/endpoints/"+id+"/test", nil)
	require.Equal(t, http.StatusAccepted, test.status, string(test.body))
	_, bodies := server.await(t, 1)
	var env struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	require.NoError(t, json.Unmarshal(bodies[0], &env))
	require.Equal(t, "balance.updated", env.Type)
	require.JSONEq(t, `{"balance":42}`, string(env.Data))

	unknown := f.call(t, acme, "POST", "/endpoints/"+id+"/test", map[string]any{"event_type": "nope"})
	require.Equal(t, http.StatusUnprocessableEntity, unknown.status)
	require.Equal(t, "event_type", unknown.json(t)["field"])
}

func TestOpenAPIIsServed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	got := f.call(t, "", "GET", "/openapi.json", nil)
	require.Equal(t, http.StatusOK, got.status)
	require.Equal(t, portal.OpenAPI, got.body)
	require.Equal(t, "3.1.0", got.json(t)["openapi"])
}

func TestAuditLogThroughTheAPI(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	acme, globex := token(t, "acme", false), token(t, "globex", false)
	id := f.call(t, acme, "POST", "/endpoints", map[string]any{"url": "https://acme.example/hooks"}).json(t)["id"].(string)
	require.Equal(t, http.StatusOK, f.call(t, acme, "PATCH", "/endpoints/"+id, map[string]any{"description": "prod"}).status)
	f.call(t, globex, "POST", "/endpoints", map[string]any{"url": "https://globex.example/hooks"})
	ctx := audit.WithActor(context.Background(), audit.Actor{Kind: audit.KindOperator, ID: "alice@provider"})
	uid, err := uuid.Parse(id)
	require.NoError(t, err)
	_, err = f.outbox.EndpointDisable(ctx, uid, "abuse review")
	require.NoError(t, err)

	got := f.call(t, acme, "GET", "/audit-log?limit=2", nil)
	require.Equal(t, http.StatusOK, got.status, string(got.body))
	page := got.json(t)
	data := page["data"].([]any)
	require.Len(t, data, 2)
	newest := data[0].(map[string]any)
	require.Equal(t, "endpoint.disable", newest["action"])
	require.Equal(t, "abuse review", newest["reason"])
	require.Equal(t, map[string]any{"kind": "operator", "id": ""}, newest["actor"], "staff names stay inside")
	require.Equal(t, map[string]any{"kind": "tenant", "id": "acme"}, data[1].(map[string]any)["actor"])
	rest := f.call(t, acme, "GET", "/audit-log?cursor="+page["next_cursor"].(string), nil).json(t)["data"].([]any)
	require.Len(t, rest, 1)
	require.Equal(t, "endpoint.create", rest[0].(map[string]any)["action"])

	theirs := f.call(t, globex, "GET", "/audit-log", nil).json(t)["data"].([]any)
	require.Len(t, theirs, 1)
	require.Equal(t, map[string]any{"kind": "tenant", "id": "globex"}, theirs[0].(map[string]any)["actor"])
}

// TestDataFilterThroughTheAPI: a tenant sets an endpoint's content filter
// through the API, and only events whose data contains it reach the
// endpoint; PATCH with null removes it.
func TestDataFilterThroughTheAPI(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	acme := token(t, "acme", false)
	server := newReceiver(t)
	created := f.call(t, acme, "POST", "/endpoints", map[string]any{"url": server.server.URL + "/hooks", "data_filter": map[string]any{"plan": "pro"}})
	require.Equal(t, http.StatusCreated, created.status, string(created.body))
	ep := created.json(t)
	require.Equal(t, map[string]any{"plan": "pro"}, ep["data_filter"])
	id := ep["id"].(string)

	f.publish(t, &outbox.Event{Type: "balance.updated", Tenant: "acme", Data: map[string]any{"plan": "free"}})
	pro := f.publish(t, &outbox.Event{Type: "balance.updated", Tenant: "acme", Data: map[string]any{"plan": "pro", "n": 1}})
	reqs, _ := server.await(t, 1)
	require.Equal(t, pro[0].EventID, reqs[0].Header.Get("webhook-id"), "only the pro plan's event")

	patched := f.call(t, acme, "PATCH", "/endpoints/"+id, map[string]any{"data_filter": nil})
	require.Equal(t, http.StatusOK, patched.status, string(patched.body))
	require.Nil(t, patched.json(t)["data_filter"])
	got := f.call(t, acme, "GET", "/endpoints/"+id, nil).json(t)
	require.Contains(t, got, "data_filter")
	require.Nil(t, got["data_filter"])
}

// TestRedriveThroughTheAPI: a tenant sends its dead deliveries again by a
// filter, after a dry run; another tenant's are neither counted nor sent,
// nor reachable by their endpoint's id; bad filters are 422 and change
// nothing.
func TestRedriveThroughTheAPI(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	acme, globex := token(t, "acme", false), token(t, "globex", false)
	servers := map[string]*receiver{}
	endpoints := map[string]string{}
	for tenant, tok := range map[string]string{"acme": acme, "globex": globex} {
		servers[tenant] = newReceiver(t)
		servers[tenant].status.Store(http.StatusServiceUnavailable)
		created := f.call(t, tok, "POST", "/endpoints", map[string]any{"url": servers[tenant].server.URL + "/hooks"})
		require.Equal(t, http.StatusCreated, created.status, string(created.body))
		endpoints[tenant] = created.json(t)["id"].(string)
	}
	since := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	f.publish(t,
		&outbox.Event{Type: "invoice.paid", Tenant: "acme", Data: map[string]int{"cents": 1}},
		&outbox.Event{Type: "invoice.paid", Tenant: "globex", Data: map[string]int{"cents": 2}},
	)
	deliveries := map[string]string{}
	for tenant, tok := range map[string]string{"acme": acme, "globex": globex} {
		list := f.call(t, tok, "GET", "/deliveries", nil).json(t)["data"].([]any)
		require.Len(t, list, 1)
		deliveries[tenant] = list[0].(map[string]any)["id"].(string)
		f.awaitStatus(t, tok, deliveries[tenant], "dead")
	}
	servers["acme"].status.Store(0)

	dry := f.call(t, acme, "POST", "/deliveries/redrive", map[string]any{"since": since, "event_type": "invoice.*", "min_status_code": 500, "max_status_code": 599, "dry_run": true})
	require.Equal(t, http.StatusOK, dry.status, string(dry.body))
	require.Equal(t, map[string]any{"matched": float64(1), "replayed": float64(0), "skipped": float64(0), "dry_run": true}, dry.json(t), "acme's own")

	for name, bad := range map[string]struct {
		body   map[string]any
		status int
	}{
		"another tenant's endpoint": {map[string]any{"since": since, "endpoint_id": endpoints["globex"]}, http.StatusNotFound},
		"no since":                  {map[string]any{}, http.StatusUnprocessableEntity},
		"future since":              {map[string]any{"since": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, http.StatusUnprocessableEntity},
		"min without max":           {map[string]any{"since": since, "min_status_code": 500}, http.StatusUnprocessableEntity},
		"status":                    {map[string]any{"since": since, "status": "pending"}, http.StatusUnprocessableEntity},
		"event type":                {map[string]any{"since": since, "event_type": "in voice"}, http.StatusUnprocessableEntity},
		"unknown field":             {map[string]any{"since": since, "tenant": "globex"}, http.StatusUnprocessableEntity},
	} {
		got := f.call(t, acme, "POST", "/deliveries/redrive", bad.body)
		require.Equal(t, bad.status, got.status, "%s: %s", name, got.body)
	}
	got := f.call(t, token(t, "acme", true), "POST", "/deliveries/redrive", map[string]any{"since": since})
	require.Equal(t, http.StatusForbidden, got.status, "a read-only token")

	done := f.call(t, acme, "POST", "/deliveries/redrive", map[string]any{"since": since, "endpoint_id": endpoints["acme"]})
	require.Equal(t, http.StatusAccepted, done.status, string(done.body))
	require.Equal(t, float64(1), done.json(t)["replayed"])
	f.awaitStatus(t, acme, deliveries["acme"], "succeeded")
	d := f.call(t, globex, "GET", "/deliveries/"+deliveries["globex"], nil).json(t)
	require.Equal(t, "dead", d["status"], "globex's stays dead")
}
