package interop_test

import (
	"context"
	"encoding/hex"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v85/webhook"

	"github.com/wharfhq/wharf/signature"
)

// The Stripe payload of the signature package's tests.
const (
	stripeSecret = "whsec_test_c2VjcmV0LWZvci1zdHJpcGUtdGVzdHM"
	stripeBody   = `{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","type":"invoice.paid"}`
	stripeTime   = int64(1700000000)
)

// The published vector from the Standard Webhooks specification
// (standard-webhooks/standard-webhooks, spec and reference library tests).
const (
	swSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	swID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	swTimestamp = int64(1614265330)
	swBody      = `{"test": 2432232314}`
)

func stripeRequest(sigHeader, body string) *signature.Request {
	h := http.Header{}
	h.Set(signature.HeaderStripeSignature, sigHeader)
	return &signature.Request{Method: http.MethodPost, Header: h, Body: []byte(body)}
}

// Runs of hex or base64 long enough to be a MAC, a key or a signature.
var (
	longHex    = regexp.MustCompile(`[0-9a-fA-F]{32,}`)
	longBase64 = regexp.MustCompile(`[A-Za-z0-9+/_]{24,}`)
)

// requireRejected asserts that err matches want and that its message holds
// none of the secrets and nothing shaped like a signature or key, as the
// signature package's tests do.
func requireRejected(t *testing.T, err, want error, secrets ...string) {
	t.Helper()
	require.ErrorIs(t, err, want)
	msg := err.Error()
	for _, s := range secrets {
		require.NotContains(t, msg, s, "secret leaked into error")
	}
	require.False(t, longHex.MatchString(msg), "hex run in error: %s", msg)
	require.False(t, longBase64.MatchString(msg), "base64 run in error: %s", msg)
}

// Cross-check with stripe-go's webhook package: a payload it signs verifies
// with ours, and one we sign passes its ValidatePayload.
func TestStripeOfficialLibrary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Now()

	t.Run("TheirsVerifiesWithOurs", func(t *testing.T) {
		t.Parallel()
		signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{
			Payload: []byte(stripeBody), Secret: stripeSecret, Timestamp: now,
		})
		v := signature.NewStripe(signature.Secrets{stripeSecret}, nil)
		require.NoError(t, v.Verify(ctx, stripeRequest(signed.Header, stripeBody)))
		requireRejected(t, signature.NewStripe(signature.Secrets{"whsec_other"}, nil).Verify(ctx, stripeRequest(signed.Header, stripeBody)), signature.ErrNoMatch, stripeSecret)
		requireRejected(t, v.Verify(ctx, stripeRequest(signed.Header, `{"id":"evt_forged"}`)), signature.ErrNoMatch, stripeSecret)

		old := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{
			Payload: []byte(stripeBody), Secret: stripeSecret, Timestamp: now.Add(-10 * time.Minute),
		})
		requireRejected(t, v.Verify(ctx, stripeRequest(old.Header, stripeBody)), signature.ErrStaleTimestamp, stripeSecret)
	})
	t.Run("OursVerifiesWithTheirs", func(t *testing.T) {
		t.Parallel()
		h, err := signature.SignStripe([]string{"whsec_rolled", stripeSecret}, now, []byte(stripeBody))
		require.NoError(t, err)
		header := h.Get(signature.HeaderStripeSignature)
		require.NoError(t, webhook.ValidatePayload([]byte(stripeBody), header, stripeSecret))
		require.NoError(t, webhook.ValidatePayload([]byte(stripeBody), header, "whsec_rolled"))
		require.ErrorIs(t, webhook.ValidatePayload([]byte(stripeBody), header, "whsec_other"), webhook.ErrNoValidSignature)
	})
	t.Run("SameSignature", func(t *testing.T) {
		t.Parallel()
		h, err := signature.SignStripe([]string{stripeSecret}, time.Unix(stripeTime, 0), []byte(stripeBody))
		require.NoError(t, err)
		theirs := hex.EncodeToString(webhook.ComputeSignature(time.Unix(stripeTime, 0), []byte(stripeBody), stripeSecret))
		require.Equal(t, "t=1700000000,v1="+theirs, h.Get(signature.HeaderStripeSignature))
	})
}

// Cross-check with the reference Go library of Standard Webhooks
// (github.com/standard-webhooks/standard-webhooks/libraries/go): what it
// signs verifies with ours, and what we sign verifies with it.
func TestStandardWebhooksReferenceLibrary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	secret, err := signature.GenerateStandardSecret()
	require.NoError(t, err)
	theirs, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	body := []byte(`{"type":"invoice.paid","data":{"id":42}}`)
	now := time.Now()

	t.Run("TheirsVerifiesWithOurs", func(t *testing.T) {
		t.Parallel()
		sig, err := theirs.Sign("msg_theirs", now, body)
		require.NoError(t, err)
		h := http.Header{}
		h.Set(standardwebhooks.HeaderWebhookID, "msg_theirs")
		h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
		h.Set(standardwebhooks.HeaderWebhookSignature, sig)
		v := signature.NewStandardWebhooks(signature.Secrets{secret}, nil)
		require.NoError(t, v.Verify(ctx, &signature.Request{Header: h, Body: body}))
		requireRejected(t, v.Verify(ctx, &signature.Request{Header: h, Body: append([]byte(" "), body...)}), signature.ErrNoMatch, secret)
	})
	t.Run("OursVerifiesWithTheirs", func(t *testing.T) {
		t.Parallel()
		other, err := signature.GenerateStandardSecret()
		require.NoError(t, err)
		// Two signatures, as during a rotation: theirs must find its own.
		h, err := signature.SignStandardWebhooks([]string{other, secret}, "msg_ours", now, body)
		require.NoError(t, err)
		require.NoError(t, theirs.Verify(body, h))
		require.Error(t, theirs.Verify([]byte(`{"type":"forged"}`), h))
	})
	t.Run("PublishedVectorWithTheirs", func(t *testing.T) {
		t.Parallel()
		h, err := signature.SignStandardWebhooks([]string{swSecret}, swID, time.Unix(swTimestamp, 0), []byte(swBody))
		require.NoError(t, err)
		vectorLib, err := standardwebhooks.NewWebhook(swSecret)
		require.NoError(t, err)
		require.NoError(t, vectorLib.VerifyIgnoringTimestamp([]byte(swBody), h))
	})
}
