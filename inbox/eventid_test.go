package inbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/signature"
)

func TestEventIDPriority(t *testing.T) {
	t.Parallel()
	sw := signature.NewStandardWebhooks(signature.Secrets{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, nil)
	plain := signature.VerifierFunc(nil)
	canonicalHash := func(canonical string) string {
		sum := sha256.Sum256([]byte(canonical))
		return "sha256:" + hex.EncodeToString(sum[:])
	}

	tests := []struct {
		name     string
		src      Source
		header   http.Header
		body     string
		wantID   string
		wantType string
	}{
		{"SchemeHeaderFirst", Source{Verifier: sw},
			http.Header{"Webhook-Id": {"msg_1"}, "X-Event-Id": {"x_1"}}, `{"id":"b_1","type":"t"}`, "msg_1", "t"},
		// An unsigned X-Event-ID never outranks the body: it is read only
		// when the verifier signs it or the source names it.
		{"XEventIDUnsignedIgnored", Source{Verifier: plain},
			http.Header{"X-Event-Id": {"x_1"}}, `{"id":"b_1"}`, "b_1", ""},
		{"XEventIDNamedBySource", Source{Verifier: plain, IDHeader: HeaderEventID},
			http.Header{"X-Event-Id": {"x_1"}}, `{"id":"b_1"}`, "x_1", ""},
		{"XEventIDIgnoredWhenSchemeLocatesID", Source{Verifier: sw},
			http.Header{"X-Event-Id": {"x_1"}}, `{"id":"b_1"}`, "b_1", ""},
		{"XEventIDIgnoredWhenFieldsConfigured", Source{Verifier: plain, IDFields: []string{"uid"}},
			http.Header{"X-Event-Id": {"x_1"}}, `{"uid":"u_1"}`, "u_1", ""},
		{"BodyID", Source{Verifier: plain}, nil, `{"id":"b_1","event_id":"e_1"}`, "b_1", ""},
		{"BodyEventID", Source{Verifier: plain}, nil, `{"event_id":"e_1","messageId":"m_1"}`, "e_1", ""},
		{"BodyMessageID", Source{Verifier: plain}, nil, `{"messageId":"m_1","event_type":"created"}`, "m_1", "created"},
		{"NumericID", Source{Verifier: plain}, nil, `{"id":12345678901234567890}`, "12345678901234567890", ""},
		{"EmptyIDSkipped", Source{Verifier: plain}, nil, `{"id":"  ","event_id":"e_1"}`, "e_1", ""},
		{"ObjectIDSkipped", Source{Verifier: plain}, nil, `{"id":{"x":1},"event_id":"e_1"}`, "e_1", ""},
		{"CustomFieldsAndHeader", Source{Verifier: plain, IDHeader: "X-Delivery", IDFields: []string{"data.uid"}, TypeFields: []string{"data.kind"}},
			http.Header{"X-Delivery": {"d_1"}}, `{"data":{"uid":"u_1","kind":"k"}}`, "d_1", "k"},
		{"DottedField", Source{Verifier: plain, IDFields: []string{"data.uid"}}, nil, `{"id":"ignored","data":{"uid":"u_1"}}`, "u_1", ""},
		{"HashOfCanonicalJSON", Source{Verifier: plain}, nil, `{ "b": [1, {"z":true,"a":null}], "a": "é<" }`,
			canonicalHash(`{"a":"é<","b":[1,{"a":null,"z":true}]}`), ""},
		{"HashExcludesVolatileFields", Source{Verifier: plain, HashExcludeFields: []string{"sent_at", "meta.retry"}}, nil,
			`{"sent_at":"now","meta":{"retry":3,"k":1},"v":2}`, canonicalHash(`{"meta":{"k":1},"v":2}`), ""},
		{"HashOfRawWhenNotJSON", Source{Verifier: plain, AllowNonJSON: true}, nil, `a=1&b=2`,
			func() string { s := sha256.Sum256([]byte("a=1&b=2")); return "sha256:" + hex.EncodeToString(s[:]) }(), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, typ, err := tt.src.identify(tt.header, parseBody([]byte(tt.body)))
			require.NoError(t, err)
			require.Equal(t, tt.wantID, id)
			require.Equal(t, tt.wantType, typ)
		})
	}
}

func TestEventIDRejects(t *testing.T) {
	t.Parallel()
	src := Source{Verifier: signature.VerifierFunc(nil)}
	for _, body := range []string{
		`{"id":"a\u0000b"}`,
		`{"id":"` + string(make([]byte, 0)) + `x` + repeat("y", MaxEventIDLength) + `"}`,
		`{"id":"ok","type":"` + repeat("t", MaxEventTypeLength+1) + `"}`,
	} {
		_, _, err := src.identify(nil, parseBody([]byte(body)))
		require.ErrorIs(t, err, errInvalidEventID, body[:min(len(body), 40)])
	}
}

func TestParseBody(t *testing.T) {
	t.Parallel()
	for body, valid := range map[string]bool{
		`{}`: true, `[1,2]`: true, `"s"`: true, ` {"a":1} `: true,
		``: false, `{`: false, `{} {}`: false, `{}}`: false, `nope`: false,
	} {
		require.Equal(t, valid, parseBody([]byte(body)).json, "%q", body)
	}
}

func repeat(s string, n int) string {
	out := make([]byte, 0, len(s)*n)
	for range n {
		out = append(out, s...)
	}
	return string(out)
}

// FuzzIdentify feeds arbitrary headers and bodies to event-id extraction: it
// must never panic, and whatever it returns must be storable.
func FuzzIdentify(f *testing.F) {
	f.Add("msg_1", "", `{"id":"b","type":"t"}`)
	f.Add("", "x", `{"event_id":1e400,"messageId":null}`)
	f.Add("", "", `[{"id":"nested"}]`)
	f.Add("", "", "\xff\xfe")
	f.Add("", "", `{"id":"\u0000"}`)
	f.Add("", "", `{"data":{"uid":{"deep":[1,2,{"a":"b"}]}},"sent_at":"x"}`)
	src := Source{
		Verifier:          signature.NewStandardWebhooks(signature.Secrets{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, nil),
		IDFields:          []string{"id", "data.uid", "event_id", "messageId"},
		HashExcludeFields: []string{"sent_at", "data.uid.deep"},
		AllowNonJSON:      true,
	}
	f.Fuzz(func(t *testing.T, webhookID, xEventID, body string) {
		h := http.Header{}
		h.Set("webhook-id", webhookID)
		h.Set(HeaderEventID, xEventID)
		parsed := parseBody([]byte(body))
		id, typ, err := src.identify(h, parsed)
		if err != nil {
			require.ErrorIs(t, err, errInvalidEventID)
			return
		}
		require.True(t, validText(id, 1, MaxEventIDLength), "id %q", id)
		require.True(t, validText(typ, 0, MaxEventTypeLength), "type %q", typ)
		// Determinism: the same request always yields the same id.
		id2, _, err := src.identify(h, parseBody([]byte(body)))
		require.NoError(t, err)
		require.Equal(t, id, id2)
		require.Len(t, src.payloadHash(parsed), sha256.Size)
	})
}

// TestProviderPresets: each provider preset's event location, read by the
// inbox, finds the id and type where that provider puts them.
func TestProviderPresets(t *testing.T) {
	t.Parallel()
	secrets := signature.Secrets{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
	signedXEventID, err := signature.NewHMAC(secrets, signature.HMACConfig{SignatureHeader: "X-Sig", Template: "{header:X-Event-ID}.{body}"}, nil)
	require.NoError(t, err)
	bodyOnly, err := signature.NewHMAC(secrets, signature.HMACConfig{SignatureHeader: "X-Sig"}, nil)
	require.NoError(t, err)
	tests := []struct {
		name     string
		verifier signature.Verifier
		header   http.Header
		body     string
		wantID   string
		wantType string
	}{
		{"Stripe", signature.NewStripe(secrets, nil), nil,
			`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","type":"invoice.paid"}`, "evt_1NG8Du2eZvKYlo2CUI79vXWy", "invoice.paid"},
		// The signed body id wins over an unsigned X-Event-ID an attacker
		// could vary on a captured request.
		{"StripeIgnoresXEventID", signature.NewStripe(secrets, nil), http.Header{"X-Event-Id": {"forged-1"}},
			`{"id":"evt_1","type":"invoice.paid"}`, "evt_1", "invoice.paid"},
		{"GitHub", signature.NewGitHub(secrets, nil),
			http.Header{"X-Github-Delivery": {"72d3162e"}, "X-Github-Event": {"push"}}, `{"id":123,"type":"x"}`, "72d3162e", "push"},
		{"ShopifyEventID", signature.NewShopify(secrets, nil),
			http.Header{"X-Shopify-Event-Id": {"evt-1"}, "X-Shopify-Webhook-Id": {"wh-1"}, "X-Shopify-Topic": {"orders/create"}}, `{"id":9}`, "evt-1", "orders/create"},
		{"ShopifyWebhookIDFallback", signature.NewShopify(secrets, nil),
			http.Header{"X-Shopify-Webhook-Id": {"wh-1"}}, `{"id":9}`, "wh-1", ""},
		{"SlackNestedType", signature.NewSlack(secrets, nil), nil,
			`{"type":"event_callback","event_id":"Ev08MFMKH6","event":{"type":"app_mention"}}`, "Ev08MFMKH6", "app_mention"},
		{"Paddle", signature.NewPaddle(secrets, nil), nil,
			`{"event_id":"evt_01hsdn","event_type":"price.created","id":"other"}`, "evt_01hsdn", "price.created"},
		{"Twilio", signature.NewTwilio(secrets, nil),
			http.Header{"I-Twilio-Idempotency-Token": {"0f5ad8a2"}}, `{"id":"x"}`, "0f5ad8a2", ""},
		{"Svix", signature.NewSvix(secrets, nil),
			http.Header{"Svix-Id": {"msg_1"}}, `{"type":"user.created"}`, "msg_1", "user.created"},
		// Svix's whitelabelled headers: webhook-id, signed when svix-id is
		// absent (a request carrying svix-id is verified with svix-*).
		{"SvixWebhookHeaders", signature.NewSvix(secrets, nil),
			http.Header{"Webhook-Id": {"msg_2"}}, `{"type":"user.created"}`, "msg_2", "user.created"},
		{"SvixIDFirst", signature.NewSvix(secrets, nil),
			http.Header{"Webhook-Id": {"msg_w"}, "Svix-Id": {"msg_s"}}, `{}`, "msg_s", ""},
		// Standard Webhooks reads webhook-id only: a svix-id is not its id.
		{"StandardWebhooksIgnoresSvixID", signature.NewStandardWebhooks(secrets, nil),
			http.Header{"Svix-Id": {"msg_s"}}, `{"id":"body"}`, "body", ""},
		// Shopify's Events deliveries: unprefixed lower-case headers, which
		// Go keys as Shopify-Event-Id, apart from X-Shopify-Event-Id.
		{"ShopifyEventsHeaders", signature.NewShopify(secrets, nil),
			http.Header{"Shopify-Event-Id": {"evt-2"}, "Shopify-Webhook-Id": {"wh-2"}, "Shopify-Topic": {"products/update"}}, `{"id":9}`, "evt-2", "products/update"},
		{"ShopifyEventsWebhookIDFallback", signature.NewShopify(secrets, nil),
			http.Header{"Shopify-Webhook-Id": {"wh-2"}}, `{"id":9}`, "wh-2", ""},
		{"ShopifyEventIDBeforeWebhookID", signature.NewShopify(secrets, nil),
			http.Header{"X-Shopify-Webhook-Id": {"wh-1"}, "Shopify-Event-Id": {"evt-2"}}, `{"id":9}`, "evt-2", ""},
		{"ShopifyPrefixedFirst", signature.NewShopify(secrets, nil),
			http.Header{"X-Shopify-Event-Id": {"evt-1"}, "Shopify-Event-Id": {"evt-2"}, "X-Shopify-Topic": {"orders/create"}, "Shopify-Topic": {"x"}}, `{"id":9}`, "evt-1", "orders/create"},
		// X-Event-ID is read when the signature covers it…
		{"HMACSigningXEventID", signedXEventID, http.Header{"X-Event-Id": {"evt-h"}}, `{"id":"body"}`, "evt-h", ""},
		// …and never when it does not: the signed body decides.
		{"HMACBodyOnlyIgnoresXEventID", bodyOnly, http.Header{"X-Event-Id": {"forged"}}, `{"id":"body"}`, "body", ""},
		// The hash is `printf %s {"a":1} | sha256sum`.
		{"UnknownVerifierIgnoresXEventID", signature.VerifierFunc(nil), http.Header{"X-Event-Id": {"forged"}},
			`{"a":1}`, "sha256:015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := Source{Name: "p", Verifier: tt.verifier}
			id, typ, err := src.identify(tt.header, parseBody([]byte(tt.body)))
			require.NoError(t, err)
			require.Equal(t, tt.wantID, id)
			require.Equal(t, tt.wantType, typ)
		})
	}
}

// FuzzParseBody: a body from the network is JSON exactly when json.Valid
// says so, decodes to what json's own decoder makes of it (numbers kept as
// json.Number), and identifies without panicking.
func FuzzParseBody(f *testing.F) {
	for _, s := range []string{`{}`, ` {"a":1} `, `{} {}`, `{}}`, `[1,2.5e3,"x",null,true]`, "{}\v", "{}\u00a0", `{"type":"t","data":{"id":7}}`, "\"\xff\"", ``, `nope`} {
		f.Add([]byte(s))
	}
	src := &Source{Name: "s", IDFields: []string{"data.id"}, TypeFields: []string{"type"}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p := parseBody(raw)
		require.Equal(t, json.Valid(raw), p.json)
		if p.json {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			var want any
			require.NoError(t, dec.Decode(&want))
			require.Equal(t, want, p.value)
		} else {
			require.Nil(t, p.value)
		}
		_, _, _ = src.identify(http.Header{}, p)
	})
}
