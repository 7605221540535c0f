package signature_test

import (
	"context"
	"crypto/sha1" // GitHub's legacy X-Hub-Signature is HMAC-SHA1.
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/signature"
)

// GitHub's published vector (docs.github.com, "Validating webhook
// deliveries", "Testing the webhook payload validation").
const (
	githubSecret    = "It's a Secret to Everybody"
	githubBody      = "Hello, World!"
	githubSignature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

func githubRequest(sig, body string) *signature.Request {
	return newRequest(body,
		signature.HeaderGitHubSignature256, sig,
		signature.HeaderGitHubDelivery, "72d3162e-cc78-11e3-81ab-4c9367dc0958",
		signature.HeaderGitHubEvent, "push")
}

func TestGitHubPublishedVector(t *testing.T) {
	t.Parallel()
	v := signature.NewGitHub(signature.Secrets{githubSecret}, nil)
	req := githubRequest(githubSignature, githubBody)
	require.NoError(t, v.Verify(context.Background(), req))

	require.Equal(t, signature.EventLocation{IDHeader: signature.HeaderGitHubDelivery, TypeHeader: signature.HeaderGitHubEvent}, v.EventLocation())
}

// TestGitHubIgnoresSHA1Header: X-Hub-Signature, the legacy HMAC-SHA1 that
// GitHub sends beside X-Hub-Signature-256, is never read, so it can neither
// verify a request alone nor spoil a genuine SHA-256 one. A sender that signs
// only with it is a NewHMAC configuration.
func TestGitHubIgnoresSHA1Header(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sha1Sig := "sha1=" + hex.EncodeToString(macOf(sha1.New, githubSecret, githubBody))
	v := signature.NewGitHub(signature.Secrets{githubSecret}, nil)

	onlySHA1 := newRequest(githubBody, "X-Hub-Signature", sha1Sig, signature.HeaderGitHubDelivery, "72d3162e")
	err := v.Verify(ctx, onlySHA1)
	requireRejected(t, err, signature.ErrMissingHeader, githubSecret)
	require.ErrorContains(t, err, signature.HeaderGitHubSignature256)

	both := githubRequest(githubSignature, githubBody)
	both.Header.Set("X-Hub-Signature", "sha1=0000")
	require.NoError(t, v.Verify(ctx, both))

	legacy, err := signature.NewHMAC(signature.Secrets{githubSecret},
		signature.HMACConfig{SignatureHeader: "X-Hub-Signature", Prefix: "sha1=", Algorithm: signature.SHA1}, nil)
	require.NoError(t, err)
	require.NoError(t, legacy.Verify(ctx, onlySHA1))
	requireRejected(t, legacy.Verify(ctx, newRequest("Hello, World?", "X-Hub-Signature", sha1Sig)), signature.ErrNoMatch, githubSecret)
}

func TestGitHubRejects(t *testing.T) {
	t.Parallel()
	const other = "another secret entirely"
	tests := []struct {
		name    string
		secrets signature.Secrets
		sig     string
		body    string
		want    error
	}{
		{"TamperedBody", signature.Secrets{githubSecret}, githubSignature, "Hello, World?", signature.ErrNoMatch},
		{"WrongSecret", signature.Secrets{other}, githubSignature, githubBody, signature.ErrNoMatch},
		{"TruncatedSignature", signature.Secrets{githubSecret}, githubSignature[:len(githubSignature)-2], githubBody, signature.ErrNoMatch},
		{"MissingHeader", signature.Secrets{githubSecret}, "", githubBody, signature.ErrMissingHeader},
		{"NoPrefix", signature.Secrets{githubSecret}, githubSignature[len("sha256="):], githubBody, signature.ErrMalformedHeader},
		{"SHA1Prefix", signature.Secrets{githubSecret}, "sha1=" + githubSignature[len("sha256="):], githubBody, signature.ErrMalformedHeader},
		{"NotHex", signature.Secrets{githubSecret}, "sha256=xyz", githubBody, signature.ErrMalformedHeader},
		{"Empty", signature.Secrets{githubSecret}, "sha256=", githubBody, signature.ErrMalformedHeader},
		{"NoSecrets", signature.Secrets{}, githubSignature, githubBody, signature.ErrNoSecrets},
		{"EmptySecret", signature.Secrets{""}, githubSignature, githubBody, signature.ErrNoSecrets},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := signature.NewGitHub(tt.secrets, nil).Verify(context.Background(), githubRequest(tt.sig, tt.body))
			requireRejected(t, err, tt.want, githubSecret, other)
		})
	}
}

func TestGitHubRotation(t *testing.T) {
	t.Parallel()
	v := signature.NewGitHub(signature.Secrets{"the new secret", githubSecret}, nil)
	require.NoError(t, v.Verify(context.Background(), githubRequest(githubSignature, githubBody)))
}

func FuzzGitHubVerify(f *testing.F) {
	f.Add(githubSignature, githubBody)
	f.Add("sha256=", "")
	f.Add("sha256= 757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17 ", githubBody)
	f.Add("sha256=sha256=00", "x")
	v := signature.NewGitHub(signature.Secrets{githubSecret}, nil)
	f.Fuzz(func(t *testing.T, sig, body string) {
		requireOnlyGenuine(t, v.Verify(context.Background(), githubRequest(sig, body)), body == githubBody, sig, body)
	})
}
