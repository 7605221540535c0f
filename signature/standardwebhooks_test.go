package signature_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/signature"
)

// The published vector from the Standard Webhooks specification.
const (
	swSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	swID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	swTimestamp = int64(1614265330)
	swBody      = `{"test": 2432232314}`
	swSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func swRequest(id, ts, sig, body string) *signature.Request {
	h := http.Header{}
	if id != "" {
		h.Set(signature.HeaderWebhookID, id)
	}
	if ts != "" {
		h.Set(signature.HeaderWebhookTimestamp, ts)
	}
	if sig != "" {
		h.Set(signature.HeaderWebhookSignature, sig)
	}
	return &signature.Request{Method: http.MethodPost, Header: h, Body: []byte(body)}
}

func atVector() *signature.Options {
	return &signature.Options{Now: func() time.Time { return time.Unix(swTimestamp, 0) }}
}

func TestStandardWebhooksPublishedVector(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	h, err := signature.SignStandardWebhooks([]string{swSecret}, swID, time.Unix(swTimestamp, 0), []byte(swBody))
	require.NoError(t, err)
	require.Equal(t, swSignature, h.Get(signature.HeaderWebhookSignature))

	v := signature.NewStandardWebhooks(signature.Secrets{swSecret}, atVector())
	require.NoError(t, v.Verify(ctx, swRequest(swID, "1614265330", swSignature, swBody)))
	require.Equal(t, signature.EventLocation{IDHeader: signature.HeaderWebhookID, TypeField: "type"}, v.EventLocation())
}

func TestStandardWebhooksRejects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	other := "whsec_" + "c2VjcmV0LXRoYXQtaXMtbm90LXRoZS1vbmU=" // base64("secret-that-is-not-the-one")

	tests := []struct {
		name    string
		secrets signature.Secrets
		req     *signature.Request
		opts    *signature.Options
		want    error
	}{
		{"TamperedBody", signature.Secrets{swSecret}, swRequest(swID, "1614265330", swSignature, `{"test": 2432232315}`), atVector(), signature.ErrNoMatch},
		{"TamperedID", signature.Secrets{swSecret}, swRequest("msg_other", "1614265330", swSignature, swBody), atVector(), signature.ErrNoMatch},
		{"WrongSecret", signature.Secrets{other}, swRequest(swID, "1614265330", swSignature, swBody), atVector(), signature.ErrNoMatch},
		{"UnknownVersionOnly", signature.Secrets{swSecret}, swRequest(swID, "1614265330", "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", swBody), atVector(), signature.ErrNoMatch},
		{"Stale", signature.Secrets{swSecret}, swRequest(swID, "1614265330", swSignature, swBody),
			&signature.Options{Now: func() time.Time { return time.Unix(swTimestamp+301, 0) }}, signature.ErrStaleTimestamp},
		{"Future", signature.Secrets{swSecret}, swRequest(swID, "1614265330", swSignature, swBody),
			&signature.Options{Now: func() time.Time { return time.Unix(swTimestamp-301, 0) }}, signature.ErrStaleTimestamp},
		{"MissingID", signature.Secrets{swSecret}, swRequest("", "1614265330", swSignature, swBody), atVector(), signature.ErrMissingHeader},
		{"MissingTimestamp", signature.Secrets{swSecret}, swRequest(swID, "", swSignature, swBody), atVector(), signature.ErrMissingHeader},
		{"MissingSignature", signature.Secrets{swSecret}, swRequest(swID, "1614265330", "", swBody), atVector(), signature.ErrMissingHeader},
		{"MalformedTimestamp", signature.Secrets{swSecret}, swRequest(swID, "yesterday", swSignature, swBody), atVector(), signature.ErrMalformedHeader},
		{"MalformedSignature", signature.Secrets{swSecret}, swRequest(swID, "1614265330", "g0hM9SsE", swBody), atVector(), signature.ErrMalformedHeader},
		{"BadBase64", signature.Secrets{swSecret}, swRequest(swID, "1614265330", "v1,***", swBody), atVector(), signature.ErrMalformedHeader},
		{"NoSecrets", nil, swRequest(swID, "1614265330", swSignature, swBody), atVector(), signature.ErrNoSecrets},
		{"EmptySecret", signature.Secrets{""}, swRequest(swID, "1614265330", swSignature, swBody), atVector(), signature.ErrNoSecrets},
		{"SecretNotBase64", signature.Secrets{"whsec_!!"}, swRequest(swID, "1614265330", swSignature, swBody), atVector(), signature.ErrNoSecrets},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := signature.NewStandardWebhooks(tt.secrets, tt.opts).Verify(ctx, tt.req)
			require.ErrorIs(t, err, tt.want)
			require.NotContains(t, err.Error(), "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "secret leaked into error")
			require.NotContains(t, err.Error(), "g0hM9SsE+OTPJTGt", "expected signature leaked into error")
		})
	}
}

func TestStandardWebhooksRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	newSecret := "whsec_bmV3LXNlY3JldC1mb3Itcm90YXRpb24tdGVzdHM="
	now := time.Now()
	body := []byte(`{"type":"x"}`)

	// Signed with the old secret only: a verifier holding both accepts it.
	h, err := signature.SignStandardWebhooks([]string{swSecret}, "msg_1", now, body)
	require.NoError(t, err)
	req := &signature.Request{Header: h, Body: body}
	require.NoError(t, signature.NewStandardWebhooks(signature.Secrets{newSecret, swSecret}, nil).Verify(ctx, req))
	require.ErrorIs(t, signature.NewStandardWebhooks(signature.Secrets{newSecret}, nil).Verify(ctx, req), signature.ErrNoMatch)

	// Signed with both (a sender mid-rotation): either secret alone verifies.
	h, err = signature.SignStandardWebhooks([]string{newSecret, swSecret}, "msg_1", now, body)
	require.NoError(t, err)
	req = &signature.Request{Header: h, Body: body}
	require.NoError(t, signature.NewStandardWebhooks(signature.Secrets{newSecret}, nil).Verify(ctx, req))
	require.NoError(t, signature.NewStandardWebhooks(signature.Secrets{swSecret}, nil).Verify(ctx, req))
}

func TestSecretSourceError(t *testing.T) {
	t.Parallel()
	src := secretFunc(func(context.Context) ([]string, error) { return nil, errors.New("vault sealed") })
	err := signature.NewStandardWebhooks(src, atVector()).Verify(context.Background(), swRequest(swID, "1614265330", swSignature, swBody))
	require.ErrorIs(t, err, signature.ErrNoSecrets)
	require.ErrorContains(t, err, "vault sealed")
}

type secretFunc func(context.Context) ([]string, error)

func (f secretFunc) Secrets(ctx context.Context) ([]string, error) { return f(ctx) }

func FuzzStandardWebhooksVerify(f *testing.F) {
	f.Add(swID, "1614265330", swSignature, swBody)
	f.Add("", "", "", "")
	f.Add(swID, "-99999999999999999999", "v1, v1,,", "{}")
	f.Add(swID, "1614265330", "v1a,abc v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", swBody)
	v := signature.NewStandardWebhooks(signature.Secrets{swSecret}, atVector())
	f.Fuzz(func(t *testing.T, id, ts, sig, body string) {
		err := v.Verify(context.Background(), swRequest(id, ts, sig, body))
		if err == nil {
			// Only the genuine vector may verify.
			if id != swID || body != swBody {
				t.Fatalf("forged request verified: id=%q ts=%q sig=%q body=%q", id, ts, sig, body)
			}
			return
		}
		for _, known := range []error{signature.ErrMissingHeader, signature.ErrMalformedHeader, signature.ErrStaleTimestamp, signature.ErrNoMatch} {
			if errors.Is(err, known) {
				return
			}
		}
		t.Fatalf("unclassified error: %v", err)
	})
}
