package outbox_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
)

// An endpoint created before the application configured a key ring is
// stored in plaintext; with the ring its secret still reads, and
// ReencryptSecrets seals it under the current key.
func ExampleOutbox_ReencryptSecrets() {
	ctx := context.Background()
	pool, cleanup := testdb.ForExample()
	defer cleanup()
	stored := func(id fmt.Stringer) string {
		var secret string
		_ = pool.QueryRow(ctx, `SELECT secret FROM wharf_outbox_endpoints WHERE id = $1`, id.String()).Scan(&secret)
		return secret
	}

	before, err := outbox.New(pool, nil) // no key ring: plaintext, as before
	if err != nil {
		fmt.Println(err)
		return
	}
	ep, err := before.EndpointCreate(ctx, &outbox.EndpointParams{URL: "https://hooks.example.com/wharf"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("stored in plaintext:", stored(ep.ID) == ep.Secret)

	// The ring as WHARF_SECRET_KEYS would give it, the current key first.
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keys, err := outbox.ParseSecretKeys("2026-11:" + base64.StdEncoding.EncodeToString(key))
	if err != nil {
		fmt.Println(err)
		return
	}
	ob, err := outbox.New(pool, &outbox.Config{SecretKeys: keys})
	if err != nil {
		fmt.Println(err)
		return
	}
	n, err := ob.ReencryptSecrets(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("re-encrypted:", n)
	fmt.Println("stored sealed:", strings.HasPrefix(stored(ep.ID), "wharfenc:v1:2026-11:"))
	secret, err := ob.EndpointSecret(ctx, ep.ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("read back:", secret == ep.Secret)
	fmt.Println(keys[0]) // a key prints as its id alone
	// Output:
	// stored in plaintext: true
	// re-encrypted: 1
	// stored sealed: true
	// read back: true
	// outbox.SecretKey{ID: 2026-11, Key: [redacted]}
}
