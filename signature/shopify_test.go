package signature_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
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
		IDHeader:    signature.HeaderShopifyEventID,
		AltIDHeader: signature.HeaderShopifyWebhookID,
		TypeHeader:  signature.HeaderShopifyTopic,
	}, loc)
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

func FuzzShopifyVerify(f *testing.F) {
	f.Add(shopifyHMAC(shopifySecret, shopifyBody), shopifyBody)
	f.Add("", "")
	f.Add("====", "x")
	f.Add("YQ", "a")
	v := signature.NewShopify(signature.Secrets{shopifySecret}, nil)
	f.Fuzz(func(t *testing.T, sig, body string) {
		requireOnlyGenuine(t, v.Verify(context.Background(), shopifyRequest(sig, body, "", "")), body == shopifyBody, sig, body)
	})
}
