package signature_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/signature"
)

// Shopify publishes no fixed vector; the expected value is computed with the
// standard library from Shopify's documented scheme (base64 HMAC-SHA256 of
// the raw body, keyed by the app's client secret).
const (
	shopifySecret = "shpss_0123456789abcdef0123456789abcdef"
	shopifyBody   = `{"id":820982911946154508,"email":"jon@example.com"}`
)

func shopifyHMAC(secret, body string) string {
	return base64.StdEncoding.EncodeToString(macOf(sha256.New, secret, body))
}

func shopifyRequest(sig, body, eventID, webhookID string) *signature.Request {
	return newRequest(body,
		signature.HeaderShopifyHmac, sig,
		signature.HeaderShopifyTopic, "orders/create",
		signature.HeaderShopifyEventID, eventID,
		signature.HeaderShopifyWebhookID, webhookID)
}

func TestShopify(t *testing.T) {
	t.Parallel()
	v := signature.NewShopify(signature.Secrets{shopifySecret}, nil)
	require.NoError(t, v.Verify(context.Background(), shopifyRequest(shopifyHMAC(shopifySecret, shopifyBody), shopifyBody, "", "")))

	loc := v.EventLocation()
	require.Equal(t, signature.EventLocation{
		IDHeader:        signature.HeaderShopifyEventID,
		AltIDHeader:     signature.HeaderShopifyEventsEventID,
		MoreIDHeaders:   []string{signature.HeaderShopifyWebhookID, signature.HeaderShopifyEventsWebhookID},
		TypeHeader:      signature.HeaderShopifyTopic,
		MoreTypeHeaders: []string{signature.HeaderShopifyEventsTopic},
	}, loc)
	// Event ids before webhook ids, each prefixed form before the other.
	require.Equal(t, []string{"X-Shopify-Event-Id", "shopify-event-id", "X-Shopify-Webhook-Id", "shopify-webhook-id"}, loc.IDHeaders())
	require.Equal(t, []string{"X-Shopify-Topic", "shopify-topic"}, loc.TypeHeaders())

	// The verifier's location is its own: a caller changing the copy it got
	// changes nothing for the next caller, nor for other Shopify verifiers.
	loc.MoreIDHeaders[0] = "X-Forged"
	require.Equal(t, signature.HeaderShopifyWebhookID, v.EventLocation().MoreIDHeaders[0])
	require.Equal(t, signature.HeaderShopifyWebhookID, signature.NewShopify(nil, nil).EventLocation().MoreIDHeaders[0])
}

// shopifyHeaders returns a request of body carrying each given signature
// header name and value, in order (Add, so a name given twice is sent
// twice), and an empty value as an empty header.
func shopifyHeaders(body string, pairs ...string) *signature.Request {
	r := newRequest(body)
	for i := 0; i+1 < len(pairs); i += 2 {
		r.Header.Add(pairs[i], pairs[i+1])
	}
	return r
}

// TestShopifyEventsHeaders: Shopify's Events deliveries sign under the
// unprefixed shopify-hmac-sha256 and, for now, under X-Shopify-Hmac-Sha256
// too (Shopify/shopify-app-js, packages/apps/shopify-api/lib/webhooks/
// validate.ts and header-names.ts). Either name verifies, both when they
// agree; both disagreeing are refused before any MAC, whichever is genuine.
func TestShopifyEventsHeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	good := shopifyHMAC(shopifySecret, shopifyBody)
	// Well-formed, wrong: a MAC of another body.
	wrong := shopifyHMAC(shopifySecret, shopifyBody+" ")
	const x, events = signature.HeaderShopifyHmac, signature.HeaderShopifyEventsHmac
	tests := []struct {
		name   string
		pairs  []string
		want   error  // nil: verifies
		naming string // in the error
		work   int64  // MACs computed
	}{
		{"EventsOnly", []string{events, good}, nil, "", 1},
		{"BothAgree", []string{x, good, events, good}, nil, "", 1},
		{"EmptyPrefixedWithEvents", []string{x, "", events, good}, nil, "", 1},
		{"EventsWrong", []string{events, wrong}, signature.ErrNoMatch, "", 1},
		{"BothAgreeWrong", []string{x, wrong, events, wrong}, signature.ErrNoMatch, "", 1},
		{"PrefixedGenuineEventsNot", []string{x, good, events, wrong}, signature.ErrMalformedHeader, "X-Shopify-Hmac-Sha256: differs from shopify-hmac-sha256", 0},
		{"EventsGenuinePrefixedNot", []string{x, wrong, events, good}, signature.ErrMalformedHeader, "differs from shopify-hmac-sha256", 0},
		{"EventsSentTwice", []string{events, good, events, good}, signature.ErrMalformedHeader, "shopify-hmac-sha256: sent 2 times", 0},
		{"EventsTooLong", []string{x, good, events, strings.Repeat("A", signature.MaxSignatureHeaderBytes+1)}, signature.ErrMalformedHeader, "MaxSignatureHeaderBytes", 0},
		{"EventsNotBase64", []string{events, "%%%"}, signature.ErrMalformedHeader, "shopify-hmac-sha256: signature is not base64", 0},
		{"Neither", []string{signature.HeaderShopifyTopic, "orders/create"}, signature.ErrMissingHeader, "X-Shopify-Hmac-Sha256 or shopify-hmac-sha256", 0},
		{"BothEmpty", []string{x, "", events, ""}, signature.ErrMissingHeader, "X-Shopify-Hmac-Sha256 or shopify-hmac-sha256", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := signature.NewShopify(signature.Secrets{shopifySecret}, nil)
			work := signature.CountWork(v)
			err := v.Verify(ctx, shopifyHeaders(shopifyBody, tt.pairs...))
			require.Equal(t, tt.work, work())
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			requireRejected(t, err, tt.want, shopifySecret)
			require.ErrorContains(t, err, tt.naming)
		})
	}
}

func TestShopifyRejects(t *testing.T) {
	t.Parallel()
	const other = "shpss_not_the_right_one"
	good := shopifyHMAC(shopifySecret, shopifyBody)
	tests := []struct {
		name    string
		secrets signature.Secrets
		sig     string
		body    string
		want    error
	}{
		{"TamperedBody", signature.Secrets{shopifySecret}, good, shopifyBody + "\n", signature.ErrNoMatch},
		{"WrongSecret", signature.Secrets{other}, good, shopifyBody, signature.ErrNoMatch},
		{"HexInsteadOfBase64", signature.Secrets{shopifySecret}, "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", shopifyBody, signature.ErrNoMatch},
		{"MissingHeader", signature.Secrets{shopifySecret}, "", shopifyBody, signature.ErrMissingHeader},
		{"NotBase64", signature.Secrets{shopifySecret}, "%%%", shopifyBody, signature.ErrMalformedHeader},
		{"NoSecrets", nil, good, shopifyBody, signature.ErrNoSecrets},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := signature.NewShopify(tt.secrets, nil).Verify(context.Background(), shopifyRequest(tt.sig, tt.body, "", ""))
			requireRejected(t, err, tt.want, shopifySecret, other)
		})
	}
}

// FuzzShopifyVerify sends sig under X-Shopify-Hmac-Sha256, eventsSig under
// shopify-hmac-sha256, either or both (by names' low bits): only the genuine
// body verifies, and only when every signature header sent agrees.
func FuzzShopifyVerify(f *testing.F) {
	good := shopifyHMAC(shopifySecret, shopifyBody)
	f.Add(good, "", uint8(1), shopifyBody)
	f.Add("", good, uint8(2), shopifyBody)
	f.Add(good, good, uint8(3), shopifyBody)
	f.Add(good, good+" ", uint8(3), shopifyBody)
	f.Add("", "", uint8(3), "")
	f.Add("====", "x", uint8(1), "x")
	f.Add("YQ", "YQ", uint8(3), "a")
	v := signature.NewShopify(signature.Secrets{shopifySecret}, nil)
	f.Fuzz(func(t *testing.T, sig, eventsSig string, names uint8, body string) {
		r := newRequest(body)
		if names&1 != 0 {
			r.Header.Set(signature.HeaderShopifyHmac, sig)
		}
		if names&2 != 0 {
			r.Header.Set(signature.HeaderShopifyEventsHmac, eventsSig)
		}
		agree := names&3 != 3 || sig == eventsSig || sig == "" || eventsSig == ""
		requireOnlyGenuine(t, v.Verify(context.Background(), r), body == shopifyBody && agree, sig, eventsSig, names, body)
	})
}
