package signature_test

import (
	"context"
	"crypto/hmac"
	"errors"
	"hash"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/signature"
)

// at returns options whose clock reads the given unix seconds.
func at(unix int64) *signature.Options {
	return &signature.Options{Now: func() time.Time { return time.Unix(unix, 0) }}
}

// Runs of hex or base64 long enough to be a MAC, a key or a signature.
var (
	longHex    = regexp.MustCompile(`[0-9a-fA-F]{32,}`)
	longBase64 = regexp.MustCompile(`[A-Za-z0-9+/_]{24,}`)
)

// requireRejected asserts that err matches want and that its message holds
// none of the secrets and nothing shaped like a signature or key, expected or
// received.
func requireRejected(t *testing.T, err, want error, secrets ...string) {
	t.Helper()
	require.ErrorIs(t, err, want)
	msg := err.Error()
	for _, s := range secrets {
		if s != "" {
			require.NotContains(t, msg, s, "secret leaked into error")
		}
	}
	require.False(t, longHex.MatchString(msg), "hex run in error: %s", msg)
	require.False(t, longBase64.MatchString(msg), "base64 run in error: %s", msg)
}

// requestErrors are the sentinels a request (as opposed to configuration)
// can cause.
var requestErrors = []error{signature.ErrMissingHeader, signature.ErrMalformedHeader, signature.ErrStaleTimestamp, signature.ErrNoMatch}

// requireRequestError fails unless err is one of requestErrors: fuzz targets
// use it to check that any input gets a classified error.
func requireRequestError(t *testing.T, err error) {
	t.Helper()
	for _, known := range requestErrors {
		if errors.Is(err, known) {
			return
		}
	}
	t.Fatalf("unclassified error: %v", err)
}

// Every preset verifies and knows where its provider puts the event id.
var _ = []interface {
	signature.Verifier
	signature.EventLocator
}{
	(*signature.StandardWebhooks)(nil), (*signature.Stripe)(nil), (*signature.Paddle)(nil),
	(*signature.HMAC)(nil), (*signature.Twilio)(nil),
}

// newRequest returns a POST of body with the given header name/value pairs;
// a pair whose value is empty is left out, so a table can drop a header.
func newRequest(body string, headerPairs ...string) *signature.Request {
	h := http.Header{}
	for i := 0; i+1 < len(headerPairs); i += 2 {
		if headerPairs[i+1] != "" {
			h.Set(headerPairs[i], headerPairs[i+1])
		}
	}
	return &signature.Request{Method: http.MethodPost, Header: h, Body: []byte(body)}
}

// macOf computes an HMAC with the standard library alone, as a provider
// would: tests check the package against it, not against itself.
func macOf(newHash func() hash.Hash, secret, content string) []byte {
	mac := hmac.New(newHash, []byte(secret))
	mac.Write([]byte(content))
	return mac.Sum(nil)
}

// requireOnlyGenuine is a fuzz target's verdict: a request verifies only if
// genuine says it is the signed one, and any other gets a classified error.
func requireOnlyGenuine(t *testing.T, err error, genuine bool, input ...any) {
	t.Helper()
	if err == nil {
		if !genuine {
			t.Fatalf("forged request verified: %q", input)
		}
		return
	}
	requireRequestError(t, err)
}

type secretFunc func(context.Context) ([]string, error)

func (f secretFunc) Secrets(ctx context.Context) ([]string, error) { return f(ctx) }
