package outbox

import (
	"fmt"
	"strings"

	"github.com/wharfhq/wharf/signature"
)

// Standard Webhooks allows keys of 24 to 64 bytes.
const (
	minSecretBytes = 24
	maxSecretBytes = 64
)

// NewSecret returns a new Standard Webhooks secret: "whsec_" followed by the
// base64 of 32 random bytes (signature.GenerateStandardSecret).
func NewSecret() (string, error) {
	secret, err := signature.GenerateStandardSecret()
	if err != nil {
		return "", fmt.Errorf("outbox: %w", err)
	}
	return secret, nil
}

// secretOrNew returns secret when it is a usable whsec_ secret, a new one
// when it is empty, and an ErrInvalidEndpoint error otherwise. The error
// never contains the secret.
func secretOrNew(secret string) (string, error) {
	if secret == "" {
		return NewSecret()
	}
	key, err := signature.DecodeStandardSecret(secret)
	if err != nil || !strings.HasPrefix(secret, signature.StandardWebhooksSecretPrefix) {
		return "", fmt.Errorf("%w: secret must be %s followed by base64", ErrInvalidEndpoint, signature.StandardWebhooksSecretPrefix)
	}
	if len(key) < minSecretBytes || len(key) > maxSecretBytes {
		return "", fmt.Errorf("%w: secret key must be %d to %d bytes, is %d", ErrInvalidEndpoint, minSecretBytes, maxSecretBytes, len(key))
	}
	return secret, nil
}
