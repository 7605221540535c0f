package inbox_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/signature"
)

// A Config with several problems is refused with all of them at once, each
// matching ErrInvalidConfig, and New changes nothing.
func TestConfigProblemsAreJoined(t *testing.T) {
	t.Parallel()
	v := signature.NewStandardWebhooks(signature.Secrets{testSecret}, nil)
	cfg := &inbox.Config{
		MaxAttempts:    -1,
		ReceiveTimeout: -1,
		MaxProcessing:  -2,
		Sources: []inbox.Source{
			{Name: "a", Verifier: v},
			{Name: "a", Verifier: v},
			{Name: "", Verifier: v},
			{Name: "b"},
			{Name: "c", Verifier: v, MaxBodyBytes: -5, OnMismatch: 7},
		},
	}
	err := cfg.Validate()
	require.ErrorIs(t, err, inbox.ErrInvalidConfig)
	for _, want := range []string{
		"MaxAttempts -1 is negative", "ReceiveTimeout -1ns is negative", "MaxProcessing -2 is negative", `source "a" is configured twice`,
		`source name "" must be`, `source "b" has no Verifier`, `source "c": MaxBodyBytes -5`, `source "c": unknown MismatchPolicy 7`,
	} {
		require.ErrorContains(t, err, want)
	}
	require.Len(t, strings.Split(err.Error(), "\n"), 8, "one line per problem")

	_, err = inbox.New(testdb.New(t), cfg)
	require.ErrorIs(t, err, inbox.ErrInvalidConfig)
	_, err = inbox.New(nil, nil)
	require.ErrorIs(t, err, inbox.ErrInvalidConfig)
	require.NoError(t, (*inbox.Config)(nil).Validate())
}
