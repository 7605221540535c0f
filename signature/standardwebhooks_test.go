package signature_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/signature"
)

// The published vector from the Standard Webhooks specification
// (standard-webhooks/standard-webhooks, spec and reference library tests).
const (
	swSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	swID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	swTimestamp = int64(1614265330)
	swBody      = `{"test": 2432232314}`
	swSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func swRequest(id, ts, sig, body string) *signature.Request {
	return newRequest(body, signature.HeaderWebhookID, id, signature.HeaderWebhookTimestamp, ts, signature.HeaderWebhookSignature, sig)
}

func atVector() *signature.Options { return at(swTimestamp) }

func TestStandardWebhooksPublishedVector(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	h, err := signature.SignStandardWebhooks([]string{swSecret}, swID, time.Unix(swTimestamp, 0), []byte(swBody))
	require.NoError(t, err)
	require.Equal(t, swSignature, h.Get(signature.HeaderWebhookSignature))

	v := signature.NewStandardWebhooks(signature.Secrets{swSecret}, atVector())
	require.NoError(t, v.Verify(ctx, swRequest(swID, "1614265330", swSignature, swBody)))
	require.Equal(t, signature.EventLocation{IDHeader: signature.HeaderWebhookID, TypeField: "type",
		SignedHeaders: []string{signature.HeaderWebhookID, signature.HeaderWebhookTimestamp}}, v.EventLocation())
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
		{"TamperedTimestamp", signature.Secrets{swSecret}, swRequest(swID, "1614265331", swSignature, swBody), atVector(), signature.ErrNoMatch},
		{"WrongSecret", signature.Secrets{other}, swRequest(swID, "1614265330", swSignature, swBody), atVector(), signature.ErrNoMatch},
		{"UnknownVersionOnly", signature.Secrets{swSecret}, swRequest(swID, "1614265330", "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", swBody), atVector(), signature.ErrNoMatch},
		{"V1SignatureLabelledV1a", signature.Secrets{swSecret}, swRequest(swID, "1614265330", "v1a,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", swBody), atVector(), signature.ErrNoMatch},
		{"Stale", signature.Secrets{swSecret}, swRequest(swID, "1614265330", swSignature, swBody), at(swTimestamp + 301), signature.ErrStaleTimestamp},
		{"Future", signature.Secrets{swSecret}, swRequest(swID, "1614265330", swSignature, swBody), at(swTimestamp - 301), signature.ErrStaleTimestamp},
		{"StaleUnderTighterTolerance", signature.Secrets{swSecret}, swRequest(swID, "1614265330", swSignature, swBody),
			&signature.Options{Tolerance: 10 * time.Second, Now: func() time.Time { return time.Unix(swTimestamp+11, 0) }}, signature.ErrStaleTimestamp},
		{"MissingID", signature.Secrets{swSecret}, swRequest("", "1614265330", swSignature, swBody), atVector(), signature.ErrMissingHeader},
		{"MissingTimestamp", signature.Secrets{swSecret}, swRequest(swID, "", swSignature, swBody), atVector(), signature.ErrMissingHeader},
		{"MissingSignature", signature.Secrets{swSecret}, swRequest(swID, "1614265330", "", swBody), atVector(), signature.ErrMissingHeader},
		{"MalformedTimestamp", signature.Secrets{swSecret}, swRequest(swID, "yesterday", swSignature, swBody), atVector(), signature.ErrMalformedHeader},
		{"MalformedSignature", signature.Secrets{swSecret}, swRequest(swID, "1614265330", "g0hM9SsE", swBody), atVector(), signature.ErrMalformedHeader},
		{"EmptyVersion", signature.Secrets{swSecret}, swRequest(swID, "1614265330", ",g0hM9SsE", swBody), atVector(), signature.ErrMalformedHeader},
		{"BadBase64", signature.Secrets{swSecret}, swRequest(swID, "1614265330", "v1,***", swBody), atVector(), signature.ErrMalformedHeader},
		{"BlankSignature", signature.Secrets{swSecret}, swRequest(swID, "1614265330", "   ", swBody), atVector(), signature.ErrMalformedHeader},
		{"NoSecrets", nil, swRequest(swID, "1614265330", swSignature, swBody), atVector(), signature.ErrNoSecrets},
		{"EmptySecret", signature.Secrets{""}, swRequest(swID, "1614265330", swSignature, swBody), atVector(), signature.ErrNoSecrets},
		{"SecretNotBase64", signature.Secrets{"whsec_!!"}, swRequest(swID, "1614265330", swSignature, swBody), atVector(), signature.ErrNoSecrets},
		{"PublicKeyWrongLength", signature.Secrets{"whpk_" + base64.StdEncoding.EncodeToString([]byte("short"))}, swRequest(swID, "1614265330", swSignature, swBody), atVector(), signature.ErrNoSecrets},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := signature.NewStandardWebhooks(tt.secrets, tt.opts).Verify(ctx, tt.req)
			requireRejected(t, err, tt.want, swSecret, strings.TrimPrefix(swSecret, "whsec_"), other)
		})
	}
}

func TestStandardWebhooksToleranceDisabled(t *testing.T) {
	t.Parallel()
	opts := &signature.Options{Tolerance: -1, Now: func() time.Time { return time.Unix(swTimestamp+365*24*3600, 0) }}
	err := signature.NewStandardWebhooks(signature.Secrets{swSecret}, opts).Verify(context.Background(), swRequest(swID, "1614265330", swSignature, swBody))
	require.NoError(t, err)
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
	require.Len(t, strings.Fields(h.Get(signature.HeaderWebhookSignature)), 2)
	req = &signature.Request{Header: h, Body: body}
	require.NoError(t, signature.NewStandardWebhooks(signature.Secrets{newSecret}, nil).Verify(ctx, req))
	require.NoError(t, signature.NewStandardWebhooks(signature.Secrets{swSecret}, nil).Verify(ctx, req))
}

func TestStandardWebhooksSecretsReadPerRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	body := []byte(`{"type":"x"}`)
	h, err := signature.SignStandardWebhooks([]string{swSecret}, "msg_1", time.Now(), body)
	require.NoError(t, err)
	req := &signature.Request{Header: h, Body: body}

	// A source backed by the app's store: rotating it takes effect on the
	// next request without building a new verifier.
	current := []string{"whsec_bmV3LXNlY3JldC1mb3Itcm90YXRpb24tdGVzdHM="}
	v := signature.NewStandardWebhooks(secretFunc(func(context.Context) ([]string, error) { return current, nil }), nil)
	require.ErrorIs(t, v.Verify(ctx, req), signature.ErrNoMatch)
	current = []string{swSecret}
	require.NoError(t, v.Verify(ctx, req))
}

func TestSecretSourceError(t *testing.T) {
	t.Parallel()
	src := secretFunc(func(context.Context) ([]string, error) { return nil, errors.New("vault sealed") })
	err := signature.NewStandardWebhooks(src, atVector()).Verify(context.Background(), swRequest(swID, "1614265330", swSignature, swBody))
	require.ErrorIs(t, err, signature.ErrNoSecrets)
	require.ErrorContains(t, err, "vault sealed")
}

func TestSignStandardWebhooksRejects(t *testing.T) {
	t.Parallel()
	now := time.Now()
	_, err := signature.SignStandardWebhooks(nil, "msg_1", now, nil)
	require.ErrorIs(t, err, signature.ErrNoSecrets)
	_, err = signature.SignStandardWebhooks([]string{swSecret}, "", now, nil)
	require.ErrorContains(t, err, "empty message id")
	_, err = signature.SignStandardWebhooks([]string{"whsec_!!"}, "msg_1", now, nil)
	require.ErrorIs(t, err, signature.ErrNoSecrets)

	_, public, err := signature.GenerateStandardKeyPair()
	require.NoError(t, err)
	_, err = signature.SignStandardWebhooks([]string{public}, "msg_1", now, nil)
	requireRejected(t, err, signature.ErrNoSecrets, public)
}

func TestStandardWebhooksV1a(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	private, public, err := signature.GenerateStandardKeyPair()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(private, signature.StandardWebhooksSecretKeyPrefix))
	require.True(t, strings.HasPrefix(public, signature.StandardWebhooksPublicKeyPrefix))
	_, otherPublic, err := signature.GenerateStandardKeyPair()
	require.NoError(t, err)

	now := time.Now()
	body := []byte(`{"type":"invoice.paid"}`)
	h, err := signature.SignStandardWebhooks([]string{private}, "msg_v1a", now, body)
	require.NoError(t, err)
	sig := h.Get(signature.HeaderWebhookSignature)
	require.True(t, strings.HasPrefix(sig, "v1a,"), sig)

	// The signature is plain ed25519 over "id.timestamp.body": check it with
	// the standard library alone.
	rawSig, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sig, "v1a,"))
	require.NoError(t, err)
	rawPublic, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(public, "whpk_"))
	require.NoError(t, err)
	signed := "msg_v1a." + h.Get(signature.HeaderWebhookTimestamp) + "." + string(body)
	require.True(t, ed25519.Verify(rawPublic, []byte(signed), rawSig))

	req := &signature.Request{Header: h, Body: body}
	require.NoError(t, signature.NewStandardWebhooks(signature.Secrets{public}, nil).Verify(ctx, req))
	require.NoError(t, signature.NewStandardWebhooks(signature.Secrets{private}, nil).Verify(ctx, req), "a whsk_ key verifies through its public half")
	require.NoError(t, signature.NewStandardWebhooks(signature.Secrets{otherPublic, public}, nil).Verify(ctx, req), "key rotation")

	requireRejected(t, signature.NewStandardWebhooks(signature.Secrets{otherPublic}, nil).Verify(ctx, req), signature.ErrNoMatch, otherPublic)
	requireRejected(t, signature.NewStandardWebhooks(signature.Secrets{swSecret}, nil).Verify(ctx, req), signature.ErrNoMatch, swSecret)
	tampered := &signature.Request{Header: h, Body: []byte(`{"type":"invoice.void"}`)}
	requireRejected(t, signature.NewStandardWebhooks(signature.Secrets{public}, nil).Verify(ctx, tampered), signature.ErrNoMatch, private, public)
	stale := signature.NewStandardWebhooks(signature.Secrets{public}, &signature.Options{Now: func() time.Time { return now.Add(6 * time.Minute) }})
	requireRejected(t, stale.Verify(ctx, req), signature.ErrStaleTimestamp, private, public)
}

func TestStandardWebhooksV1aKeyForms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	seedKey := "whsk_" + base64.StdEncoding.EncodeToString(priv.Seed())
	fullKey := "whsk_" + base64.StdEncoding.EncodeToString(priv)
	publicKey := "whpk_" + base64.StdEncoding.EncodeToString(pub)
	body := []byte(`{}`)

	for name, key := range map[string]string{"Seed": seedKey, "SeedAndPublic": fullKey} {
		h, err := signature.SignStandardWebhooks([]string{key}, "msg_1", time.Now(), body)
		require.NoError(t, err, name)
		require.NoError(t, signature.NewStandardWebhooks(signature.Secrets{publicKey}, nil).Verify(ctx, &signature.Request{Header: h, Body: body}), name)
	}

	// A 64-byte key whose public half belongs to another seed is refused.
	otherPub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	mismatched := "whsk_" + base64.StdEncoding.EncodeToString(append(priv.Seed(), otherPub...))
	_, err = signature.SignStandardWebhooks([]string{mismatched}, "msg_1", time.Now(), body)
	requireRejected(t, err, signature.ErrNoSecrets, mismatched)
	_, err = signature.SignStandardWebhooks([]string{"whsk_c2hvcnQ="}, "msg_1", time.Now(), body)
	requireRejected(t, err, signature.ErrNoSecrets)
}

func TestStandardWebhooksMixedVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	private, public, err := signature.GenerateStandardKeyPair()
	require.NoError(t, err)
	secret, err := signature.GenerateStandardSecret()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(secret, signature.StandardWebhooksSecretPrefix))
	key, err := signature.DecodeStandardSecret(secret)
	require.NoError(t, err)
	require.Len(t, key, 32)

	// A sender moving from symmetric to asymmetric signs both ways; a
	// receiver holding either key accepts.
	body := []byte(`{"type":"x"}`)
	h, err := signature.SignStandardWebhooks([]string{secret, private}, "msg_1", time.Now(), body)
	require.NoError(t, err)
	entries := strings.Fields(h.Get(signature.HeaderWebhookSignature))
	require.Len(t, entries, 2)
	require.True(t, strings.HasPrefix(entries[0], "v1,"))
	require.True(t, strings.HasPrefix(entries[1], "v1a,"))
	req := &signature.Request{Header: h, Body: body}
	require.NoError(t, signature.NewStandardWebhooks(signature.Secrets{secret}, nil).Verify(ctx, req))
	require.NoError(t, signature.NewStandardWebhooks(signature.Secrets{public}, nil).Verify(ctx, req))
}

func TestSvix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Svix signs exactly like Standard Webhooks under svix-* names: the
	// published vector carries over (Svix's own Go library tests it too:
	// svix/svix-webhooks, go/webhook_test.go, TestWebhookSign).
	h := http.Header{}
	h.Set(signature.HeaderSvixID, swID)
	h.Set(signature.HeaderSvixTimestamp, "1614265330")
	h.Set(signature.HeaderSvixSignature, swSignature)
	req := &signature.Request{Method: http.MethodPost, Header: h, Body: []byte(swBody)}

	v := signature.NewSvix(signature.Secrets{swSecret}, atVector())
	require.NoError(t, v.Verify(ctx, req))
	require.Equal(t, signature.EventLocation{IDHeader: signature.HeaderSvixID, AltIDHeader: signature.HeaderWebhookID, TypeField: "type",
		SignedHeaders: []string{signature.HeaderSvixID, signature.HeaderSvixTimestamp, signature.HeaderWebhookID, signature.HeaderWebhookTimestamp}},
		v.EventLocation())

	// The webhook-* verifier does not read svix-* headers, as the Standard
	// Webhooks reference libraries do not; Svix's whitelabelled webhook-*
	// headers are TestSvixWebhookHeaders'.
	err := signature.NewStandardWebhooks(signature.Secrets{swSecret}, atVector()).Verify(ctx, req)
	requireRejected(t, err, signature.ErrMissingHeader, swSecret)
	require.ErrorContains(t, err, signature.HeaderWebhookID)
	require.NotContains(t, err.Error(), signature.HeaderSvixID)

	tampered := &signature.Request{Header: h, Body: []byte(`{"test": 1}`)}
	requireRejected(t, v.Verify(ctx, tampered), signature.ErrNoMatch, swSecret)
	requireRejected(t, signature.NewSvix(signature.Secrets{swSecret}, at(swTimestamp+400)).Verify(ctx, req), signature.ErrStaleTimestamp, swSecret)
}

func FuzzStandardWebhooksVerify(f *testing.F) {
	f.Add(swID, "1614265330", swSignature, swBody)
	f.Add("", "", "", "")
	f.Add(swID, "-99999999999999999999", "v1, v1,,", "{}")
	f.Add(swID, "1614265330", "v1a,abc v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", swBody)
	f.Add(swID, " 1614265330 ", "v1a,"+strings.Repeat("A", 86)+"== v9,x", swBody)
	_, public, err := signature.GenerateStandardKeyPair()
	if err != nil {
		f.Fatal(err)
	}
	v := signature.NewStandardWebhooks(signature.Secrets{swSecret, public}, atVector())
	f.Fuzz(func(t *testing.T, id, ts, sig, body string) {
		// Only the genuine vector may verify.
		genuine := id == swID && body == swBody
		requireOnlyGenuine(t, v.Verify(context.Background(), swRequest(id, ts, sig, body)), genuine, id, ts, sig, body)
	})
}
