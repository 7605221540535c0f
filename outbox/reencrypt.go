package outbox

import (
	"context"
	"fmt"
)

// ReencryptSecrets seals every endpoint's signing secrets and auth
// credentials with the current key (Config.SecretKeys[0]) and returns how
// many endpoints it rewrote: the plaintext of rows written before a key
// ring was configured, and values sealed with an older key of the ring.
// Afterwards no row needs a key other than the current one, so older keys
// can leave the ring.
//
// It works 100 endpoints per transaction, locking only those it rewrites,
// and is safe to run at any time: during deliveries (which read either
// form, both openable), beside endpoint writes (which wait for its batch,
// or make it skip their row), and on several nodes at once (each row is
// rewritten once). It is idempotent: a second run rewrites nothing. A
// node whose current key is still the old one goes on writing with it,
// and its rows may be missed: switch every node's current key first.
//
// A value it cannot open (sealed with a key the ring lacks, altered, or
// malformed) leaves its endpoint as it was; the others are rewritten, and
// the error, where errors.Is(err, ErrSecretDecrypt) is true, names those
// endpoints. Without Config.SecretKeys it returns an error where
// errors.Is(err, ErrInvalidConfig) is true.
func (o *Outbox) ReencryptSecrets(ctx context.Context) (int, error) {
	if !o.keys.Enabled() {
		return 0, fmt.Errorf("%w: ReencryptSecrets needs Config.SecretKeys", ErrInvalidConfig)
	}
	return o.keys.Reencrypt(ctx, o.pool)
}
