package outbox

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/wharfhq/wharf/internal/secretbox"
)

// Endpoint secrets at rest are sealed by internal/secretbox, whose package
// documentation describes the stored form.

// ErrSecretDecrypt is matched (errors.Is) by the error of reading an
// endpoint's signing secret or credential that cannot be decrypted: sealed
// with a key Config.SecretKeys lacks (or with no Config.SecretKeys at all),
// altered, copied from another endpoint's row, or malformed. The error
// names the endpoint, the field and the key id, never a secret, a key or
// the stored value. A delivery that meets it fails its attempt with it (no
// request is sent) and is retried on the schedule.
var ErrSecretDecrypt = secretbox.ErrDecrypt

// SecretKey is a key of Config.SecretKeys, which encrypts endpoint secrets
// at rest. Keep keys out of the database: in a secret manager, or the
// environment (ParseSecretKeys). Printing a SecretKey with fmt, slog or
// encoding/json shows only its ID.
type SecretKey struct {
	// ID names the key in every value it seals, so that a ring of several
	// keys knows which one opens a value: 1 to 64 ASCII letters, digits,
	// '.', '_' or '-' (a date such as "2026-11" reads well). Never reuse an
	// ID for another key.
	ID string
	// Key is the AES-256 key: 32 random bytes (`openssl rand -base64 32`).
	Key []byte
}

// String shows the key's ID, never the key.
func (k SecretKey) String() string { return "outbox.SecretKey{ID: " + k.ID + ", Key: [redacted]}" }

// GoString is String, for %#v.
func (k SecretKey) GoString() string { return k.String() }

// LogValue is String, for slog.
func (k SecretKey) LogValue() slog.Value { return slog.StringValue(k.String()) }

// MarshalJSON encodes the ID alone.
func (k SecretKey) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct{ ID string }{k.ID})
}

// ParseSecretKeys parses a key ring written as comma-separated ID:KEY
// entries, KEY the standard base64 of 32 bytes, the current key first:
//
//	2026-11:q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq8w=,2026-05:3q2+796tvu/erb7v3q2+796tvu/erb7v3q2+796tvu8=
//
// (white space around entries is ignored). Its errors name the entry and
// the ID, never a key. An empty s is an empty ring. The result still goes
// through New's checks (IDs, duplicates).
func ParseSecretKeys(s string) ([]SecretKey, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var keys []SecretKey
	for i, entry := range strings.Split(s, ",") {
		id, encoded, ok := strings.Cut(strings.TrimSpace(entry), ":")
		if !ok {
			return nil, fmt.Errorf("%w: secret key entry %d is not ID:BASE64KEY", ErrInvalidConfig, i+1)
		}
		if !secretbox.ValidKeyID(id) {
			return nil, fmt.Errorf("%w: secret key entry %d: the ID must be 1 to %d letters, digits, '.', '_' or '-'", ErrInvalidConfig, i+1, secretbox.MaxKeyIDLen)
		}
		key, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil {
			return nil, fmt.Errorf("%w: secret key %q: the key is not standard base64", ErrInvalidConfig, id)
		}
		if len(key) != secretbox.KeyBytes {
			return nil, fmt.Errorf("%w: secret key %q: the key must be %d bytes, is %d", ErrInvalidConfig, id, secretbox.KeyBytes, len(key))
		}
		keys = append(keys, SecretKey{ID: id, Key: key})
	}
	return keys, nil
}

// ringKeys returns the keys of the ring for keys.
func ringKeys(keys []SecretKey) []secretbox.Key {
	out := make([]secretbox.Key, len(keys))
	for i, k := range keys {
		out[i] = secretbox.Key{ID: k.ID, Key: k.Key}
	}
	return out
}
