package shared_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/shared"
)

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://hooks.slack.com/services/T000/B000/XXXXSECRET": "https://hooks.slack.com/services/…",
		"https://ops:pw@example.com/hook?token=abc":             "https://xxxxx@example.com/hook?…",
		"https://example.com":                                   "https://example.com",
		"https://example.com/wharf":                             "https://example.com/wharf",
		"https://api.telegram.org/bot123456:AAHdqTcv/send":      "https://api.telegram.org/…",
		"https://in.example.com/3f9a1c7e2b8d4f60a1b2":           "https://in.example.com/…",
		"::not a url": "(unparsable URL)",
	} {
		require.Equal(t, want, shared.RedactURL(in), in)
	}
}
