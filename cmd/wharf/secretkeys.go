package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/wharfhq/wharf/outbox"
)

// envSecretKeys holds the outbox's key ring (outbox.Config.SecretKeys):
// comma-separated ID:BASE64KEY entries, the current key first. Only the
// environment carries it: a flag would show in the process list.
const envSecretKeys = "WHARF_SECRET_KEYS"

// secretKeys returns the key ring of $WHARF_SECRET_KEYS (none when it is
// unset); its errors never quote a key.
func secretKeys() ([]outbox.SecretKey, error) {
	keys, err := outbox.ParseSecretKeys(os.Getenv(envSecretKeys))
	if err != nil {
		return nil, usageError{fmt.Sprintf("$%s: %v", envSecretKeys, err)}
	}
	return keys, nil
}

// runOutboxReencrypt is `wharf outbox endpoints reencrypt`.
func runOutboxReencrypt(ctx context.Context, e *env, fs *flag.FlagSet, args []string) error {
	fs.Usage = func() {
		fmt.Fprintf(e.errOut, "usage: wharf outbox endpoints reencrypt\n\n"+
			"Seals every endpoint's signing secrets and auth credentials with the current key of\n"+
			"$%[1]s, and says how many endpoints it rewrote: those stored in plaintext, and those\n"+
			"sealed with an older key of the ring. Safe beside running applications and other runs.\n\n"+
			"$%[1]s is the applications' outbox.Config.SecretKeys: comma-separated ID:KEY entries,\n"+
			"KEY the standard base64 of 32 random bytes (openssl rand -base64 32), the current key first:\n"+
			"  %[1]s='2026-11:<base64>,2026-05:<base64>'\n"+
			"Rotating: give every node the new key after the current one, then first; run this;\n"+
			"then remove the old key everywhere. Keys are never printed.\n", envSecretKeys)
		fs.PrintDefaults()
	}
	if rest, err := parseInterleaved(fs, args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", rest[0])}
	}
	keys, err := secretKeys()
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return usageError{fmt.Sprintf("set $%s to the key ring, the current key first (wharf help outbox endpoints reencrypt)", envSecretKeys)}
	}
	ob, err := e.outbox(ctx, false)
	if err != nil {
		return err
	}
	n, err := ob.ReencryptSecrets(ctx)
	fmt.Fprintf(e.out, "re-encrypted %d endpoints with key %s\n", n, keys[0].ID)
	if err != nil {
		return err
	}
	if len(keys) > 1 {
		fmt.Fprintf(e.out, "no endpoint needs another key of $%s now; remove the old keys once every node has %s first\n", envSecretKeys, keys[0].ID)
	}
	return nil
}
