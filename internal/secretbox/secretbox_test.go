package secretbox

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/outboxtype"
)

// testKey is a 32-byte key whose bytes are all b.
func testKey(id string, b byte) Key {
	return Key{ID: id, Key: bytes.Repeat([]byte{b}, KeyBytes)}
}

func testRing(t testing.TB, keys ...Key) *Ring {
	t.Helper()
	r, err := New(&Config{Keys: keys})
	require.NoError(t, err)
	return r
}

func TestSealOpen(t *testing.T) {
	t.Parallel()
	ring := testRing(t, testKey("k1", 1))
	id := uuid.New()
	const plaintext = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"

	sealed, err := ring.Seal(id, FieldSecret, plaintext)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(sealed, "wharfenc:v1:k1:"), sealed)
	require.NotContains(t, sealed, "c2VjcmV0")
	again, err := ring.Seal(id, FieldSecret, plaintext)
	require.NoError(t, err)
	require.NotEqual(t, sealed, again, "a fresh nonce per seal")

	got, err := ring.Open(id, FieldSecret, sealed)
	require.NoError(t, err)
	require.Equal(t, plaintext, got)

	got, err = ring.Open(id, FieldSecret, plaintext)
	require.NoError(t, err)
	require.Equal(t, plaintext, got, "plaintext (no prefix) reads as it is")

	// Bound to the endpoint and the field.
	_, err = ring.Open(uuid.New(), FieldSecret, sealed)
	require.ErrorIs(t, err, ErrDecrypt)
	require.ErrorContains(t, err, "fails authentication")
	_, err = ring.Open(id, outboxtype.FieldAuthToken, sealed)
	require.ErrorIs(t, err, ErrDecrypt)

	// Any byte changed fails authentication or parsing.
	raw := []byte(sealed)
	for i := len("wharfenc:v1:k1:"); i < len(raw); i++ {
		tampered := bytes.Clone(raw)
		tampered[i] ^= 0x01
		_, err := ring.Open(id, FieldSecret, string(tampered))
		require.ErrorIs(t, err, ErrDecrypt, "byte %d", i)
	}

	// A ring without k1, a ring without keys.
	_, err = testRing(t, testKey("k2", 2)).Open(id, FieldSecret, sealed)
	require.ErrorIs(t, err, ErrDecrypt)
	require.ErrorContains(t, err, `sealed with key "k1", which Config.SecretKeys lacks`)
	require.ErrorContains(t, err, id.String())
	require.ErrorContains(t, err, "signing secret")
	require.NotContains(t, err.Error(), sealed[len("wharfenc:v1:k1:"):])
	_, err = testRing(t).Open(id, FieldSecret, sealed)
	require.ErrorContains(t, err, `sealed with key "k1", but Config.SecretKeys is empty`)

	// The same id with another key: authentication fails.
	_, err = testRing(t, testKey("k1", 9)).Open(id, FieldSecret, sealed)
	require.ErrorContains(t, err, "fails authentication")

	// Without keys, seal stores plaintext.
	stored, err := testRing(t).Seal(id, FieldSecret, plaintext)
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
		_, err := ring.Open(uuid.New(), FieldSecret, v)
		require.ErrorIs(t, err, ErrDecrypt, v)
	}
}

func TestSealAuth(t *testing.T) {
	t.Parallel()
	ring := testRing(t, testKey("k1", 1))
	id := uuid.New()
	a := &outboxtype.Auth{Kind: outboxtype.AuthOAuth2ClientCredentials, TokenURL: "https://auth.example/token", ClientID: "client", ClientSecret: "client-s3cret", Scopes: []string{"a"}}
	sealed, err := ring.SealAuth(id, a)
	require.NoError(t, err)
	require.Equal(t, "client-s3cret", a.ClientSecret, "SealAuth copies")
	require.True(t, strings.HasPrefix(sealed.ClientSecret, "wharfenc:v1:k1:"))
	require.Equal(t, a.ClientID, sealed.ClientID, "identifiers stay readable")
	require.Empty(t, sealed.Token)
	opened, err := ring.OpenAuth(id, sealed)
	require.NoError(t, err)
	require.True(t, opened.Equal(a))
	require.Equal(t, a.Fingerprint(), opened.Fingerprint())

	// A client secret copied into the token field fails.
	moved := *sealed
	moved.Kind, moved.Token, moved.ClientSecret = outboxtype.AuthBearer, sealed.ClientSecret, ""
	_, err = ring.OpenAuth(id, &moved)
	require.ErrorIs(t, err, ErrDecrypt)
	require.ErrorContains(t, err, "bearer token")
}

func TestCheckSecretKeys(t *testing.T) {
	t.Parallel()
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	key := bytes.Repeat([]byte("x"), 32)
	CheckKeys([]Key{
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
// with ErrDecrypt without quoting the ciphertext.
func FuzzParseSealed(f *testing.F) {
	ring := testRing(f, testKey("k1", 1), testKey("k0", 7))
	id := uuid.MustParse("0190a5f0-0000-7000-8000-000000000001")
	sealed, err := ring.Seal(id, FieldSecret, "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
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
			require.True(t, ValidKeyID(s.keyID))
			require.GreaterOrEqual(t, len(s.data), gcmNonceBytes+gcmTagBytes)
		}
		plaintext, err := ring.Open(id, FieldSecret, v)
		if err != nil {
			require.True(t, errors.Is(err, ErrDecrypt))
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
