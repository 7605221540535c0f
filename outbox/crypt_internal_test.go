package outbox

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// testKey is a 32-byte key whose bytes are all b.
func testKey(id string, b byte) SecretKey {
	return SecretKey{ID: id, Key: bytes.Repeat([]byte{b}, secretKeyBytes)}
}

func testRing(t testing.TB, keys ...SecretKey) *keyRing {
	t.Helper()
	r, err := newKeyRing(keys)
	require.NoError(t, err)
	return r
}

func TestSealOpen(t *testing.T) {
	t.Parallel()
	ring := testRing(t, testKey("k1", 1))
	id := uuid.New()
	const plaintext = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"

	sealed, err := ring.seal(id, fieldSecret, plaintext)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(sealed, "wharfenc:v1:k1:"), sealed)
	require.NotContains(t, sealed, "c2VjcmV0")
	again, err := ring.seal(id, fieldSecret, plaintext)
	require.NoError(t, err)
	require.NotEqual(t, sealed, again, "a fresh nonce per seal")

	got, err := ring.open(id, fieldSecret, sealed)
	require.NoError(t, err)
	require.Equal(t, plaintext, got)

	got, err = ring.open(id, fieldSecret, plaintext)
	require.NoError(t, err)
	require.Equal(t, plaintext, got, "plaintext (no prefix) reads as it is")

	// Bound to the endpoint and the field.
	_, err = ring.open(uuid.New(), fieldSecret, sealed)
	require.ErrorIs(t, err, ErrSecretDecrypt)
	require.ErrorContains(t, err, "fails authentication")
	_, err = ring.open(id, fieldAuthToken, sealed)
	require.ErrorIs(t, err, ErrSecretDecrypt)

	// Any byte changed fails authentication or parsing.
	raw := []byte(sealed)
	for i := len("wharfenc:v1:k1:"); i < len(raw); i++ {
		tampered := bytes.Clone(raw)
		tampered[i] ^= 0x01
		_, err := ring.open(id, fieldSecret, string(tampered))
		require.ErrorIs(t, err, ErrSecretDecrypt, "byte %d", i)
	}

	// A ring without k1, a ring without keys.
	_, err = testRing(t, testKey("k2", 2)).open(id, fieldSecret, sealed)
	require.ErrorIs(t, err, ErrSecretDecrypt)
	require.ErrorContains(t, err, `sealed with key "k1", which Config.SecretKeys lacks`)
	require.ErrorContains(t, err, id.String())
	require.ErrorContains(t, err, "signing secret")
	require.NotContains(t, err.Error(), sealed[len("wharfenc:v1:k1:"):])
	_, err = testRing(t).open(id, fieldSecret, sealed)
	require.ErrorContains(t, err, `sealed with key "k1", but Config.SecretKeys is empty`)

	// The same id with another key: authentication fails.
	_, err = testRing(t, testKey("k1", 9)).open(id, fieldSecret, sealed)
	require.ErrorContains(t, err, "fails authentication")

	// Without keys, seal stores plaintext.
	stored, err := testRing(t).seal(id, fieldSecret, plaintext)
	require.NoError(t, err)
	require.Equal(t, plaintext, stored)
}

func TestOpenMalformed(t *testing.T) {
	t.Parallel()
	ring := testRing(t, testKey("k1", 1))
	for _, v := range []string{
		"wharfenc:",
		"wharfenc:v2:k1:AAAA",
		"wharfenc:v1:",
		"wharfenc:v1:k1",
		"wharfenc:v1::AAAA",
		"wharfenc:v1:k 1:AAAA",
		"wharfenc:v1:k1:",
		"wharfenc:v1:k1:AAAA", // too short
		"wharfenc:v1:k1:" + strings.Repeat("A", 43) + "=", // padded
		"wharfenc:v1:k1:" + strings.Repeat("+", 48),       // not base64url
		"wharfenc:v1:" + strings.Repeat("k", 65) + ":" + strings.Repeat("A", 48),
	} {
		_, err := ring.open(uuid.New(), fieldSecret, v)
		require.ErrorIs(t, err, ErrSecretDecrypt, v)
	}
}

func TestSealAuth(t *testing.T) {
	t.Parallel()
	ring := testRing(t, testKey("k1", 1))
	id := uuid.New()
	a := &storedAuth{Kind: AuthOAuth2ClientCredentials, TokenURL: "https://auth.example/token", ClientID: "client", ClientSecret: "client-s3cret", Scopes: []string{"a"}}
	sealed, err := ring.sealAuth(id, a)
	require.NoError(t, err)
	require.Equal(t, "client-s3cret", a.ClientSecret, "sealAuth copies")
	require.True(t, strings.HasPrefix(sealed.ClientSecret, "wharfenc:v1:k1:"))
	require.Equal(t, a.ClientID, sealed.ClientID, "identifiers stay readable")
	require.Empty(t, sealed.Token)
	opened, err := ring.openAuth(id, sealed)
	require.NoError(t, err)
	require.True(t, opened.equal(a))
	require.Equal(t, a.fingerprint(), opened.fingerprint())

	// A client secret copied into the token field fails.
	moved := *sealed
	moved.Kind, moved.Token, moved.ClientSecret = AuthBearer, sealed.ClientSecret, ""
	_, err = ring.openAuth(id, &moved)
	require.ErrorIs(t, err, ErrSecretDecrypt)
	require.ErrorContains(t, err, "bearer token")
}

func TestParseSecretKeys(t *testing.T) {
	t.Parallel()
	k1 := bytes.Repeat([]byte{1}, 32)
	k2 := bytes.Repeat([]byte{2}, 32)
	b64 := base64.StdEncoding.EncodeToString
	keys, err := ParseSecretKeys(" 2026-11:" + b64(k2) + " ,2026-05:" + b64(k1))
	require.NoError(t, err)
	require.Equal(t, []SecretKey{{ID: "2026-11", Key: k2}, {ID: "2026-05", Key: k1}}, keys)

	keys, err = ParseSecretKeys("  ")
	require.NoError(t, err)
	require.Empty(t, keys)

	short := b64(k1[:31])
	for _, s := range []string{
		"k1",
		"k1:" + b64(k1) + ",",
		":" + b64(k1),
		"k:1:" + b64(k1),
		"k1:" + short,
		"k1:!" + b64(k1),
	} {
		_, err := ParseSecretKeys(s)
		require.ErrorIs(t, err, ErrInvalidConfig, s)
		require.NotContains(t, err.Error(), b64(k1)[:8], "never quotes a key")
		require.NotContains(t, err.Error(), short[:8])
	}
}

func TestSecretKeyNeverPrinted(t *testing.T) {
	t.Parallel()
	k := SecretKey{ID: "k1", Key: []byte("0123456789abcdef0123456789abcdef")}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "key", k, "keys", []SecretKey{k})
	js, err := json.Marshal(Config{SecretKeys: []SecretKey{k}}.SecretKeys)
	require.NoError(t, err)
	for _, out := range []string{
		fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s", k, k, k, k), fmt.Sprintf("%v", []SecretKey{k}),
		fmt.Sprintf("%+v", Config{SecretKeys: []SecretKey{k}}), logs.String(), string(js),
	} {
		require.Contains(t, out, "k1")
		require.NotContains(t, out, "0123456789")
		require.NotContains(t, out, base64.StdEncoding.EncodeToString(k.Key)[:10])
		require.NotContains(t, out, "30313233") // hex
	}
}

func TestCheckSecretKeys(t *testing.T) {
	t.Parallel()
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	key := bytes.Repeat([]byte("x"), 32)
	checkSecretKeys([]SecretKey{
		{ID: "k1", Key: key},
		{ID: "k1", Key: key},
		{ID: "", Key: key},
		{ID: "a:b", Key: key},
		{ID: "k2", Key: key[:16]},
	}, bad)
	require.Len(t, problems, 4, problems)
	require.Contains(t, problems[0], `SecretKeys[1]: ID "k1" repeats SecretKeys[0]'s`)
	require.Contains(t, problems[1], "SecretKeys[2].ID must be")
	require.Contains(t, problems[2], "SecretKeys[3].ID must be")
	require.Contains(t, problems[3], `SecretKeys[4] (ID "k2"): Key must be 32 bytes (AES-256), is 16`)
	for _, p := range problems {
		require.NotContains(t, p, "xxxx")
	}
}

// FuzzParseSealed feeds the parser database content: it never panics, a
// value it accepts formats back to itself, and opening anything with a
// ring either succeeds (plaintext, or a value sealed by the ring) or fails
// with ErrSecretDecrypt without quoting the ciphertext.
func FuzzParseSealed(f *testing.F) {
	ring := testRing(f, testKey("k1", 1), testKey("k0", 7))
	id := uuid.MustParse("0190a5f0-0000-7000-8000-000000000001")
	sealed, err := ring.seal(id, fieldSecret, "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	require.NoError(f, err)
	for _, seed := range []string{
		sealed, sealed[:len(sealed)-1], sealed + "A", "whsec_plain", "", "wharfenc:", "wharfenc:v1:k1:",
		"wharfenc:v1:k0:" + sealed[len("wharfenc:v1:k1:"):], "wharfenc:v1:kx:" + sealed[len("wharfenc:v1:k1:"):],
		"wharfenc:v9:k1:AAAA", "wharfenc:v1:k1:====",
		// Found by fuzzing: a line break the base64 decoder skips; a key
		// id equal to the ciphertext.
		"wharfenc:v1:0:0000000000000000000\r00000000000000000000",
		"wharfenc:v1:0000000000000000:0000000000000000",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		s, err := parseSealed(v)
		switch {
		case err != nil:
			require.Nil(t, s)
			require.True(t, strings.HasPrefix(v, sealedPrefix))
		case s == nil:
			require.False(t, strings.HasPrefix(v, sealedPrefix))
		default:
			require.Equal(t, v, s.String(), "a parsed value formats back to itself")
			require.True(t, validKeyID(s.keyID))
			require.GreaterOrEqual(t, len(s.data), gcmNonceBytes+gcmTagBytes)
		}
		plaintext, err := ring.open(id, fieldSecret, v)
		if err != nil {
			require.True(t, errors.Is(err, ErrSecretDecrypt))
			// The message may quote a valid key id, never the ciphertext.
			if keyID, encoded, ok := strings.Cut(strings.TrimPrefix(v, sealedV1), ":"); ok && len(encoded) >= 16 {
				require.NotContains(t, strings.ReplaceAll(err.Error(), keyID, ""), encoded)
			}
			return
		}
		if s == nil {
			require.Equal(t, v, plaintext)
		}
	})
}
