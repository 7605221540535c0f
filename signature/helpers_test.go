package signature_test

import (
	"context"
	"errors"
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

type secretFunc func(context.Context) ([]string, error)

func (f secretFunc) Secrets(ctx context.Context) ([]string, error) { return f(ctx) }
