package snippets

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/outbox"
)

// secretKeys is the README's outbox with endpoint secrets encrypted at
// rest, and the re-encryption after a key change.
func secretKeys(ctx context.Context, pool *pgxpool.Pool) error {
	// readme:begin secret-keys
	// WHARF_SECRET_KEYS="2026-11:<base64 of 32 random bytes>,2026-05:<the previous key>"
	keys, err := outbox.ParseSecretKeys(os.Getenv("WHARF_SECRET_KEYS"))
	if err != nil {
		return err
	}
	ob, err := outbox.New(pool, &outbox.Config{SecretKeys: keys}) // keys[0] seals new writes
	if err != nil {
		return err
	}

	// Once every node has the new key first: seal the plaintext rows and
	// move the old key's rows to it (or `wharf outbox endpoints reencrypt`).
	n, err := ob.ReencryptSecrets(ctx)
	if err != nil {
		return err
	}
	log.Printf("%d endpoints re-encrypted; the older keys can leave the ring", n)
	// readme:end
	return nil
}
