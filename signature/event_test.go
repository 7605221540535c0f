package signature_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/signature"
)

func TestEventLocationExtract(t *testing.T) {
	t.Parallel()
	loc := signature.EventLocation{
		IDHeader:    "X-Event-Id",
		AltIDHeader: "X-Delivery-Id",
		IDField:     "meta.id",
		TypeHeader:  "X-Event-Type",
		TypeField:   "type",
	}
	request := func(headers map[string]string, body string) *signature.Request {
		h := http.Header{}
		for k, v := range headers {
			h.Set(k, v)
		}
		return &signature.Request{Header: h, Body: []byte(body)}
	}
	body := `{"type":"order.paid","meta":{"id":"evt_body"}}`

	tests := []struct {
		name     string
		req      *signature.Request
		wantID   string
		wantType string
	}{
		{"HeadersFirst", request(map[string]string{"X-Event-Id": "evt_h", "X-Delivery-Id": "dlv", "X-Event-Type": "t_h"}, body), "evt_h", "t_h"},
		{"AltHeader", request(map[string]string{"X-Delivery-Id": "dlv"}, body), "dlv", "order.paid"},
		{"BlankHeaderFallsThrough", request(map[string]string{"X-Event-Id": "  "}, body), "evt_body", "order.paid"},
		{"NestedField", request(nil, body), "evt_body", "order.paid"},
		{"NumberID", request(nil, `{"meta":{"id":12345678901234567890},"type":7}`), "12345678901234567890", "7"},
		{"ObjectIsNotAnID", request(nil, `{"meta":{"id":{"x":1}},"type":["a"]}`), "", ""},
		{"PathThroughScalar", request(nil, `{"meta":"flat"}`), "", ""},
		{"NotJSON", request(nil, `token=abc&type=x`), "", ""},
		{"JSONArray", request(nil, `[{"type":"x"}]`), "", ""},
		{"Empty", request(nil, ``), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, typ := loc.Extract(tt.req)
			require.Equal(t, tt.wantID, id)
			require.Equal(t, tt.wantType, typ)
		})
	}

	id, typ := loc.Extract(nil)
	require.Empty(t, id)
	require.Empty(t, typ)
	id, typ = signature.EventLocation{}.Extract(request(map[string]string{"X-Event-Id": "x"}, body))
	require.Empty(t, id, "an empty location points nowhere")
	require.Empty(t, typ)
}

func FuzzEventLocationExtract(f *testing.F) {
	f.Add(`{"event_id":"Ev1","event":{"type":"app_mention"}}`)
	f.Add(`{"event_id":1e999,"event":null}`)
	f.Add(`{"event":{"type":{"type":"x"}}}`)
	f.Add(`{`)
	loc := signature.EventLocation{IDField: "event_id", TypeField: "event.type"}
	f.Fuzz(func(t *testing.T, body string) {
		// No panic, and an id is only found in a valid JSON body.
		id, typ := loc.Extract(&signature.Request{Header: http.Header{}, Body: []byte(body)})
		if (id != "" || typ != "") && !json.Valid([]byte(body)) {
			t.Fatalf("id %q, type %q found in invalid JSON %q", id, typ, body)
		}
	})
}
