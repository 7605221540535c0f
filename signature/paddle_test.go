package signature_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/signature"
)

// Paddle's fixed vector, from the official Go SDK's webhook verifier
// example (github.com/PaddleHQ/paddle-go-sdk, example_webhook_verifier_test.go).
const (
	paddleSecret    = "pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_hKkRiCGyyRhbFwIUuqiTBgI7gnWoV0Gr"
	paddleTimestamp = int64(1710929255)
	paddleSignature = "ts=1710929255;h1=6c05ef8fa83c44d751be6d259ec955ce5638e2c54095bf128e408e2fce1589c8"
	paddleBody      = `{"data":{"id":"pri_01hsdn96k2hxjzsq5yerecdj9j","name":null,"status":"active","quantity":{"maximum":999999,"minimum":1},"tax_mode":"account_setting","product_id":"pro_01hsdn8qp7yydry3x1yeg6a9rv","unit_price":{"amount":"1000","currency_code":"USD"},"custom_data":null,"description":"testing","import_meta":null,"trial_period":null,"billing_cycle":{"interval":"month","frequency":1},"unit_price_overrides":[]},"event_id":"evt_01hsdn97563968dy0szkmgjwh3","event_type":"price.created","occurred_at":"2024-03-20T10:07:35.590857Z","notification_id":"ntf_01hsdn977e920kbgzt6r6c9rqc"}`
)

func paddleRequest(sig, body string) *signature.Request {
	return newRequest(body, signature.HeaderPaddleSignature, sig)
}

// paddleH1 computes Paddle's documented h1 with the standard library alone:
// hex HMAC-SHA256 of "ts:body" keyed by the secret string.
func paddleH1(secret string, ts int64, body string) string {
	return hex.EncodeToString(macOf(sha256.New, secret, strconv.FormatInt(ts, 10)+":"+body))
}

func TestPaddleSDKVector(t *testing.T) {
	t.Parallel()
	v := signature.NewPaddle(signature.Secrets{paddleSecret}, at(paddleTimestamp))
	req := paddleRequest(paddleSignature, paddleBody)
	require.NoError(t, v.Verify(context.Background(), req))

	require.Equal(t, signature.EventLocation{IDField: "event_id", TypeField: "event_type"}, v.EventLocation())
}

func TestPaddleRejects(t *testing.T) {
	t.Parallel()
	const other = "pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_someoneElsesSecretValue00"
	good := "6c05ef8fa83c44d751be6d259ec955ce5638e2c54095bf128e408e2fce1589c8"
	tests := []struct {
		name    string
		secrets signature.Secrets
		header  string
		body    string
		now     int64
		want    error
	}{
		{"TamperedBody", signature.Secrets{paddleSecret}, paddleSignature, paddleBody[:len(paddleBody)-1] + " }", paddleTimestamp, signature.ErrNoMatch},
		{"TamperedTimestamp", signature.Secrets{paddleSecret}, "ts=1710929256;h1=" + good, paddleBody, paddleTimestamp, signature.ErrNoMatch},
		{"WrongSecret", signature.Secrets{other}, paddleSignature, paddleBody, paddleTimestamp, signature.ErrNoMatch},
		{"Stale", signature.Secrets{paddleSecret}, paddleSignature, paddleBody, paddleTimestamp + 301, signature.ErrStaleTimestamp},
		{"Future", signature.Secrets{paddleSecret}, paddleSignature, paddleBody, paddleTimestamp - 301, signature.ErrStaleTimestamp},
		{"MissingHeader", signature.Secrets{paddleSecret}, "", paddleBody, paddleTimestamp, signature.ErrMissingHeader},
		{"StripeShaped", signature.Secrets{paddleSecret}, "t=1710929255,v1=" + good, paddleBody, paddleTimestamp, signature.ErrMalformedHeader},
		{"NoTimestamp", signature.Secrets{paddleSecret}, "h1=" + good, paddleBody, paddleTimestamp, signature.ErrMalformedHeader},
		{"NoSignature", signature.Secrets{paddleSecret}, "ts=1710929255", paddleBody, paddleTimestamp, signature.ErrMalformedHeader},
		{"NotHex", signature.Secrets{paddleSecret}, "ts=1710929255;h1=g00d", paddleBody, paddleTimestamp, signature.ErrMalformedHeader},
		{"EmptySecrets", signature.Secrets{}, paddleSignature, paddleBody, paddleTimestamp, signature.ErrNoSecrets},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := signature.NewPaddle(tt.secrets, at(tt.now)).Verify(context.Background(), paddleRequest(tt.header, tt.body))
			requireRejected(t, err, tt.want, paddleSecret, other)
		})
	}
}

func TestPaddleRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const newSecret = "pdl_ntfset_rotated"
	// Signed with the new secret and the old: each secret alone verifies.
	header := "ts=1710929255;h1=" + paddleH1(newSecret, paddleTimestamp, paddleBody) + ";h1=" + paddleH1(paddleSecret, paddleTimestamp, paddleBody)
	require.NoError(t, signature.NewPaddle(signature.Secrets{newSecret}, at(paddleTimestamp)).Verify(ctx, paddleRequest(header, paddleBody)))
	require.NoError(t, signature.NewPaddle(signature.Secrets{paddleSecret}, at(paddleTimestamp)).Verify(ctx, paddleRequest(header, paddleBody)))
	// A receiver holding both accepts the SDK's single signature.
	require.NoError(t, signature.NewPaddle(signature.Secrets{newSecret, paddleSecret}, at(paddleTimestamp)).Verify(ctx, paddleRequest(paddleSignature, paddleBody)))
}

func FuzzPaddleVerify(f *testing.F) {
	f.Add(paddleSignature, paddleBody)
	f.Add("ts=;h1=", "")
	f.Add(";;;", "{}")
	f.Add("ts=1710929255;h1=00;h1=;x=y", "a")
	v := signature.NewPaddle(signature.Secrets{paddleSecret}, at(paddleTimestamp))
	f.Fuzz(func(t *testing.T, header, body string) {
		requireOnlyGenuine(t, v.Verify(context.Background(), paddleRequest(header, body)), body == paddleBody, header, body)
	})
}
