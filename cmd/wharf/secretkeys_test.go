package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
)

// `wharf outbox endpoints reencrypt` seals plaintext rows, then moves them
// to a new current key; the other outbox commands write with the ring of
// $WHARF_SECRET_KEYS; no key is ever printed. Not parallel: it sets the
// environment.
func TestOutboxEndpointsReencrypt(t *testing.T) {
	ctx := context.Background()
	url := testdb.NewURL(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	key1, key2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	b64 := base64.StdEncoding.EncodeToString
	stored := func(id string) string {
		t.Helper()
		var secret string
		require.NoError(t, pool.QueryRow(ctx, `SELECT secret FROM wharf_outbox_endpoints WHERE id = $1`, id).Scan(&secret))
		return secret
	}
	requireNoKey := func(outputs ...string) {
		t.Helper()
		for _, out := range outputs {
			for _, k := range [][]byte{key1, key2} {
				require.NotContains(t, out, b64(k)[:12])
			}
		}
	}
	add := func(host string) (id, secret string) {
		t.Helper()
		code, out, errOut := cli(t, "-database-url", url, "outbox", "endpoints", "add", "-url", "https://"+host+"/hook")
		require.Equal(t, 0, code, errOut)
		requireNoKey(out, errOut)
		id = strings.Fields(out)[1]
		_, secret, _ = strings.Cut(out, "): ")
		return id, strings.TrimSpace(secret)
	}

	t.Setenv(envSecretKeys, "")
	code, _, errOut := cli(t, "-database-url", url, "outbox", "endpoints", "reencrypt")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "set $WHARF_SECRET_KEYS")
	plainID, plainSecret := add("a.example")
	require.Equal(t, plainSecret, stored(plainID), "no ring: plaintext")

	t.Setenv(envSecretKeys, "k1:"+b64(key1))
	code, out, errOut := cli(t, "-database-url", url, "outbox", "endpoints", "reencrypt")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "re-encrypted 1 endpoints with key k1\n", out)
	require.True(t, strings.HasPrefix(stored(plainID), "wharfenc:v1:k1:"))
	sealedID, sealedSecret := add("b.example")
	require.True(t, strings.HasPrefix(sealedSecret, "whsec_"), "the receiver's secret, in plaintext")
	require.True(t, strings.HasPrefix(stored(sealedID), "wharfenc:v1:k1:"))
	code, out, errOut = cli(t, "-database-url", url, "outbox", "endpoints", "rotate-secret", sealedID)
	require.Equal(t, 0, code, errOut)
	_, sealedSecret, _ = strings.Cut(out, "(shown once): ")
	sealedSecret = strings.TrimSpace(sealedSecret)

	t.Setenv(envSecretKeys, " k2:"+b64(key2)+", k1:"+b64(key1))
	code, out, errOut = cli(t, "-database-url", url, "outbox", "endpoints", "reencrypt")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "re-encrypted 2 endpoints with key k2\n")
	require.Contains(t, out, "remove the old keys once every node has k2 first")
	requireNoKey(out, errOut)
	code, out, _ = cli(t, "-database-url", url, "outbox", "endpoints", "reencrypt")
	require.Equal(t, 0, code)
	require.Contains(t, out, "re-encrypted 0 endpoints")

	ob, err := outbox.New(pool, &outbox.Config{SecretKeys: []outbox.SecretKey{{ID: "k2", Key: key2}}})
	require.NoError(t, err)
	for id, want := range map[string]string{plainID: plainSecret, sealedID: sealedSecret} {
		got, err := ob.EndpointSecret(ctx, uuid.MustParse(id))
		require.NoError(t, err)
		require.Equal(t, want, got)
	}

	// A ring without k2: the endpoints are named, the keys are not.
	t.Setenv(envSecretKeys, "k3:"+b64(key1))
	code, out, errOut = cli(t, "-database-url", url, "outbox", "endpoints", "reencrypt")
	require.Equal(t, 1, code)
	require.Contains(t, out, "re-encrypted 0 endpoints")
	require.Contains(t, errOut, `sealed with key "k2", which Config.SecretKeys lacks`)
	require.Contains(t, errOut, plainID)
	requireNoKey(out, errOut)

	// A bad ring is refused without quoting a key.
	for _, ring := range []string{"k1:" + b64(key1[:31]), "k1:" + b64(key1) + ",k1:" + b64(key2), "k1"} {
		t.Setenv(envSecretKeys, ring)
		code, out, errOut = cli(t, "-database-url", url, "outbox", "endpoints", "reencrypt")
		require.NotZero(t, code, ring)
		require.Contains(t, errOut, "invalid config", ring)
		requireNoKey(out, errOut)
	}

	t.Setenv(envSecretKeys, "")
	code, _, errOut = cli(t, "help", "outbox", "endpoints", "reencrypt")
	require.Equal(t, 0, code)
	require.Contains(t, errOut, "WHARF_SECRET_KEYS='2026-11:<base64>,2026-05:<base64>'")
}
