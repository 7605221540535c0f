package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/portal"
)

// checkedClient sends requests to the portal's API and checks each
// exchange against the OpenAPI document the handler serves.
type checkedClient struct {
	t         *testing.T
	base      string // the server's URL and the portal's prefix
	token     string
	validator validator.Validator
}

func (c *checkedClient) do(method, path string, body any) (int, map[string]any) {
	c.t.Helper()
	var data []byte
	if body != nil {
		var err error
		data, err = json.Marshal(body)
		require.NoError(c.t, err)
	}
	req, err := http.NewRequest(method, c.base+"/api/v1"+path, bytes.NewReader(data))
	require.NoError(c.t, err)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	respBody, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	require.NoError(c.t, resp.Body.Close())

	// The document's paths start at /api/v1: check the exchange as if the
	// portal were mounted at the root.
	checkReq, err := http.NewRequest(method, strings.Replace(req.URL.String(), "/portal/api/v1", "/api/v1", 1), bytes.NewReader(data))
	require.NoError(c.t, err)
	checkReq.Header = req.Header.Clone()
	if c.token == "" {
		checkReq.Header.Set("Authorization", "Bearer none") // a 401 is checked for its response only
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	ok, errs := c.validator.ValidateHttpRequestResponse(checkReq, resp)
	if !ok {
		for _, e := range errs {
			c.t.Errorf("%s %s → %d: %s: %s %v", method, path, resp.StatusCode, e.Message, e.Reason, e.SchemaValidationErrors)
		}
	}
	var out map[string]any
	if len(respBody) > 0 {
		require.NoError(c.t, json.Unmarshal(respBody, &out), string(respBody))
	}
	return resp.StatusCode, out
}

// TestAPIMatchesItsOpenAPIDocument: the document is valid OpenAPI 3.1,
// and every request and response of a tenant's session (successes and
// errors) matches it, formats included.
func TestAPIMatchesItsOpenAPIDocument(t *testing.T) {
	t.Parallel()
	ps := newPortalServer(t)
	served, err := http.Get(ps.server.URL + "/portal/api/v1/openapi.json")
	require.NoError(t, err)
	spec, err := io.ReadAll(served.Body)
	require.NoError(t, err)
	require.NoError(t, served.Body.Close())
	require.Equal(t, portal.OpenAPI, spec)

	doc, err := libopenapi.NewDocument(spec)
	require.NoError(t, err)
	v, errs := validator.NewValidator(doc, config.WithFormatAssertions())
	require.Empty(t, errs)
	valid, docErrs := v.ValidateDocument()
	require.True(t, valid, "%v", docErrs)

	received := make(chan struct{}, 10)
	sink := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { received <- struct{}{} }))
	t.Cleanup(sink.Close)
	receiver := sink.URL
	tok, err := portal.NewToken(portalKey, portal.Token{Tenant: "acme", Expires: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	c := &checkedClient{t: t, base: ps.server.URL + "/portal", token: tok, validator: v}

	status, ep := c.do("POST", "/endpoints", map[string]any{"url": receiver + "/hooks", "description": "prod", "data_filter": map[string]any{"plan": "pro"}})
	require.Equal(t, http.StatusCreated, status)
	id := ep["id"].(string)
	status, _ = c.do("GET", "/endpoints", nil)
	require.Equal(t, http.StatusOK, status)
	status, _ = c.do("GET", "/endpoints/"+id, nil)
	require.Equal(t, http.StatusOK, status)
	status, _ = c.do("PATCH", "/endpoints/"+id, map[string]any{"description": "production", "event_types": []string{"balance.*", "wharf.test"}, "data_filter": nil})
	require.Equal(t, http.StatusOK, status)
	status, _ = c.do("GET", "/endpoints/"+id+"/secret", nil)
	require.Equal(t, http.StatusOK, status)
	status, _ = c.do("POST", "/endpoints/"+id+"/rotate-secret", map[string]any{})
	require.Equal(t, http.StatusOK, status)
	status, _ = c.do("GET", "/event-types", nil)
	require.Equal(t, http.StatusOK, status)

	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, ps.pool, func(tx pgx.Tx) error {
		_, err := ps.outbox.PublishTx(ctx, tx, &outbox.Event{Type: "balance.updated", Tenant: "acme", Data: map[string]int{"balance": 1}})
		return err
	}))
	status, _ = c.do("POST", "/endpoints/"+id+"/test", nil)
	require.Equal(t, http.StatusAccepted, status)
	for range 2 {
		select {
		case <-received:
		case <-time.After(30 * time.Second):
			t.Fatal("the events did not arrive in 30s")
		}
	}
	var deliveryID string
	require.Eventually(t, func() bool {
		_, page := c.do("GET", "/deliveries?endpoint_id="+id+"&status=succeeded&limit=1", nil)
		data, _ := page["data"].([]any)
		if len(data) == 0 {
			return false
		}
		deliveryID = data[0].(map[string]any)["id"].(string)
		return true
	}, 30*time.Second, 20*time.Millisecond)
	status, _ = c.do("GET", "/deliveries/"+deliveryID, nil)
	require.Equal(t, http.StatusOK, status)
	status, _ = c.do("POST", "/deliveries/"+deliveryID+"/replay", nil)
	require.Equal(t, http.StatusAccepted, status)
	status, _ = c.do("POST", "/endpoints/"+id+"/recover", map[string]any{"since": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)})
	require.Equal(t, http.StatusAccepted, status)
	status, _ = c.do("POST", "/deliveries/redrive", map[string]any{"since": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "status": "succeeded", "event_type": "balance.*", "min_status_code": 200, "max_status_code": 299, "dry_run": true})
	require.Equal(t, http.StatusOK, status)
	status, _ = c.do("POST", "/deliveries/redrive", map[string]any{"since": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "endpoint_id": id})
	require.Equal(t, http.StatusAccepted, status)
	status, _ = c.do("POST", "/deliveries/redrive", map[string]any{"since": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "event_type": "in voice"})
	require.Equal(t, http.StatusUnprocessableEntity, status)

	// Errors are in the document too.
	status, _ = c.do("POST", "/endpoints", map[string]any{"url": "ftp://x"})
	require.Equal(t, http.StatusUnprocessableEntity, status)
	status, _ = c.do("GET", "/endpoints/0196b8a4-0000-7000-8000-000000000000", nil)
	require.Equal(t, http.StatusNotFound, status)
	status, _ = c.do("GET", "/deliveries?status=succeeded&since="+time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)+"&event_type=balance.updated", nil)
	require.Equal(t, http.StatusOK, status)
	status, _ = c.do("GET", "/audit-log?limit=3", nil)
	require.Equal(t, http.StatusOK, status)
	status, _ = c.do("DELETE", "/endpoints/"+id, nil)
	require.Equal(t, http.StatusNoContent, status)
	c.token = ""
	status, _ = c.do("GET", "/endpoints", nil)
	require.Equal(t, http.StatusUnauthorized, status)
}
