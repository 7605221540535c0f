package outbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/google/uuid"
)

// Endpoint secrets at rest.
//
// With Config.SecretKeys set, an endpoint's signing secrets (the secret and
// previous_secret columns) and its auth credentials (the token, password
// and client_secret members of the auth column) are stored sealed:
//
//	wharfenc:v1:<key id>:<base64url, unpadded: 12-byte nonce, AES-256-GCM ciphertext and tag>
//
// The additional authenticated data is the header up to the key id, the
// endpoint's id and the field ("secret" for both signing secret columns,
// which a rotation moves from one to the other in SQL; "auth.token",
// "auth.password", "auth.client_secret"), so a value copied to another row
// or field fails authentication. A value without the "wharfenc:" prefix is
// plaintext: a row written before a key ring was configured, read as it is
// and sealed by ReencryptSecrets. The auth column's other members (kind,
// user name, token URL, client id, scopes) are no secrets (Endpoint.Auth
// returns them) and stay in the clear, so reads that describe an endpoint
// need no key.

// Sealed values.
const (
	sealedPrefix   = "wharfenc:"
	sealedV1       = sealedPrefix + "v1:"
	secretKeyBytes = 32 // AES-256
	maxKeyIDLen    = 64
	gcmNonceBytes  = 12
	gcmTagBytes    = 16
	// maxSealedLen bounds what the parser decodes: database content, which
	// Wharf writes far shorter (credentials are at most 4 KiB).
	maxSealedLen = 64 << 10
)

// Fields a sealed value is bound to (its additional authenticated data).
const (
	fieldSecret           = "secret"
	fieldAuthToken        = "auth.token"
	fieldAuthPassword     = "auth.password"
	fieldAuthClientSecret = "auth.client_secret"
)

// reencryptBatch is how many endpoints one ReencryptSecrets transaction
// locks and rewrites.
const reencryptBatch = 100

// ErrSecretDecrypt is matched (errors.Is) by the error of reading an
// endpoint's signing secret or credential that cannot be decrypted: sealed
// with a key Config.SecretKeys lacks (or with no Config.SecretKeys at all),
// altered, copied from another endpoint's row, or malformed. The error
// names the endpoint, the field and the key id, never a secret, a key or
// the stored value. A delivery that meets it fails its attempt with it (no
// request is sent) and is retried on the schedule.
var ErrSecretDecrypt = errors.New("outbox: endpoint secret cannot be decrypted")

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
		if !validKeyID(id) {
			return nil, fmt.Errorf("%w: secret key entry %d: the ID must be 1 to %d letters, digits, '.', '_' or '-'", ErrInvalidConfig, i+1, maxKeyIDLen)
		}
		key, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil {
			return nil, fmt.Errorf("%w: secret key %q: the key is not standard base64", ErrInvalidConfig, id)
		}
		if len(key) != secretKeyBytes {
			return nil, fmt.Errorf("%w: secret key %q: the key must be %d bytes, is %d", ErrInvalidConfig, id, secretKeyBytes, len(key))
		}
		keys = append(keys, SecretKey{ID: id, Key: key})
	}
	return keys, nil
}

// validKeyID accepts 1 to 64 ASCII letters, digits, '.', '_' or '-': a
// key ID is quoted in errors and stands between colons in sealed values.
func validKeyID(id string) bool {
	if id == "" || len(id) > maxKeyIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c == '.' || c == '_' || c == '-' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
			return false
		}
	}
	return true
}

// checkSecretKeys adds Config.SecretKeys' problems to bad; it never quotes
// a key.
func checkSecretKeys(keys []SecretKey, bad func(format string, args ...any)) {
	seen := make(map[string]int, len(keys))
	for i, k := range keys {
		if !validKeyID(k.ID) {
			bad("SecretKeys[%d].ID must be 1 to %d letters, digits, '.', '_' or '-'", i, maxKeyIDLen)
			continue
		}
		if len(k.Key) != secretKeyBytes {
			bad("SecretKeys[%d] (ID %q): Key must be %d bytes (AES-256), is %d", i, k.ID, secretKeyBytes, len(k.Key))
		}
		if j, dup := seen[k.ID]; dup {
			bad("SecretKeys[%d]: ID %q repeats SecretKeys[%d]'s (each key needs an ID of its own)", i, k.ID, j)
			continue
		}
		seen[k.ID] = i
	}
}

// cloneSecretKeys copies keys, so the caller's slices can change after New.
func cloneSecretKeys(keys []SecretKey) []SecretKey {
	if keys == nil {
		return nil
	}
	out := make([]SecretKey, len(keys))
	for i, k := range keys {
		out[i] = SecretKey{ID: k.ID, Key: append([]byte(nil), k.Key...)}
	}
	return out
}

// keyRing seals endpoint secrets with its current key and opens them with
// any of its keys. The zero ring (no keys) stores plaintext.
type keyRing struct {
	current string
	aeads   map[string]cipher.AEAD
}

// newKeyRing builds the ring of checked keys (checkSecretKeys), keys[0]
// current.
func newKeyRing(keys []SecretKey) (*keyRing, error) {
	r := &keyRing{aeads: make(map[string]cipher.AEAD, len(keys))}
	for _, k := range keys {
		block, err := aes.NewCipher(k.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: SecretKeys %q: %v", ErrInvalidConfig, k.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("%w: SecretKeys %q: %v", ErrInvalidConfig, k.ID, err)
		}
		r.aeads[k.ID] = aead
	}
	if len(keys) > 0 {
		r.current = keys[0].ID
	}
	return r, nil
}

// enabled reports whether the ring seals what it stores.
func (r *keyRing) enabled() bool { return r.current != "" }

// currentPrefix is the prefix of every value sealed with the current key.
func (r *keyRing) currentPrefix() string { return sealedV1 + r.current + ":" }

// sealedValue is a parsed "wharfenc:v1:<key id>:<base64>" value.
type sealedValue struct {
	keyID string
	// data is the nonce followed by the ciphertext and its tag.
	data []byte
}

// header is the value's text up to its base64: part of the additional
// authenticated data.
func (s *sealedValue) header() string { return sealedV1 + s.keyID + ":" }

// String formats s as it is stored.
func (s *sealedValue) String() string {
	return s.header() + base64.RawURLEncoding.EncodeToString(s.data)
}

// parseSealed parses a stored value: (nil, nil) for plaintext (no
// "wharfenc:" prefix), the sealed value, or an error that never quotes v
// beyond a valid key id.
func parseSealed(v string) (*sealedValue, error) {
	if !strings.HasPrefix(v, sealedPrefix) {
		return nil, nil
	}
	rest, ok := strings.CutPrefix(v, sealedV1)
	if !ok {
		return nil, errors.New("not a wharfenc:v1 value (an unknown version, or written by a newer Wharf)")
	}
	if len(v) > maxSealedLen {
		return nil, fmt.Errorf("a sealed value longer than %d bytes", maxSealedLen)
	}
	keyID, encoded, ok := strings.Cut(rest, ":")
	if !ok || !validKeyID(keyID) {
		return nil, errors.New("a malformed wharfenc:v1 value (no valid key id)")
	}
	// Canonical base64url only: the decoder skips line breaks, which would
	// give one value two stored forms.
	data, err := base64.RawURLEncoding.Strict().DecodeString(encoded)
	if err != nil || len(data) < gcmNonceBytes+gcmTagBytes || base64.RawURLEncoding.EncodeToString(data) != encoded {
		return nil, fmt.Errorf("a malformed wharfenc:v1 value of key %q (its ciphertext is not base64url or too short)", keyID)
	}
	return &sealedValue{keyID: keyID, data: data}, nil
}

// additionalData binds a sealed value to its header, endpoint and field.
func additionalData(header string, endpointID uuid.UUID, field string) []byte {
	return []byte(header + endpointID.String() + ":" + field)
}

// seal returns the stored form of plaintext, the field of an endpoint:
// sealed with the current key, or plaintext without a ring.
func (r *keyRing) seal(endpointID uuid.UUID, field, plaintext string) (string, error) {
	if !r.enabled() {
		return plaintext, nil
	}
	aead := r.aeads[r.current]
	s := &sealedValue{keyID: r.current, data: make([]byte, gcmNonceBytes, gcmNonceBytes+len(plaintext)+gcmTagBytes)}
	if _, err := rand.Read(s.data); err != nil {
		return "", fmt.Errorf("outbox: seal %s: nonce: %w", field, err)
	}
	s.data = aead.Seal(s.data, s.data[:gcmNonceBytes], []byte(plaintext), additionalData(s.header(), endpointID, field))
	return s.String(), nil
}

// open returns the plaintext of a stored value of an endpoint's field:
// plaintext as it is, a sealed value decrypted with the ring's key of its
// id. Its errors match ErrSecretDecrypt.
func (r *keyRing) open(endpointID uuid.UUID, field, stored string) (string, error) {
	s, err := parseSealed(stored)
	if err != nil {
		return "", r.openError(endpointID, field, err.Error())
	}
	if s == nil {
		return stored, nil
	}
	aead, ok := r.aeads[s.keyID]
	switch {
	case !ok && !r.enabled():
		return "", r.openError(endpointID, field, fmt.Sprintf("sealed with key %q, but Config.SecretKeys is empty", s.keyID))
	case !ok:
		return "", r.openError(endpointID, field, fmt.Sprintf("sealed with key %q, which Config.SecretKeys lacks", s.keyID))
	}
	nonce, ciphertext := s.data[:gcmNonceBytes], s.data[gcmNonceBytes:]
	plaintext, err := aead.Open(nil, nonce, ciphertext, additionalData(s.header(), endpointID, field))
	if err != nil {
		return "", r.openError(endpointID, field, fmt.Sprintf(
			"fails authentication under key %q: altered, copied from another endpoint or field, or sealed by another key of that ID", s.keyID))
	}
	return string(plaintext), nil
}

func (r *keyRing) openError(endpointID uuid.UUID, field, why string) error {
	return fmt.Errorf("%w: endpoint %s %s: %s", ErrSecretDecrypt, endpointID, fieldName(field), why)
}

// fieldName says what a field is, for errors.
func fieldName(field string) string {
	switch field {
	case fieldSecret:
		return "signing secret"
	case fieldAuthToken:
		return "bearer token"
	case fieldAuthPassword:
		return "basic password"
	case fieldAuthClientSecret:
		return "OAuth2 client secret"
	}
	return field
}

// isCurrent reports whether stored needs no reencryption: sealed with the
// current key, or plaintext without a ring ("" included: no credential).
func (r *keyRing) isCurrent(stored string) bool {
	if !r.enabled() || stored == "" {
		return true
	}
	return strings.HasPrefix(stored, r.currentPrefix())
}

// credential is a secret member of a storedAuth and its field.
type credential struct {
	field string
	value *string
}

// credentials lists the secret members of s.
func (s *storedAuth) credentials() []credential {
	return []credential{
		{fieldAuthToken, &s.Token},
		{fieldAuthPassword, &s.Password},
		{fieldAuthClientSecret, &s.ClientSecret},
	}
}

// sealedCredential reports whether a of checked auth holds a credential
// that reads as a sealed value: refused, so that a stored value with the
// prefix is always one Wharf sealed.
func (s *storedAuth) sealedCredential() bool {
	for _, c := range s.credentials() {
		if strings.HasPrefix(*c.value, sealedPrefix) {
			return true
		}
	}
	return false
}

// sealAuth returns a copy of checked auth a of an endpoint with its
// credentials sealed.
func (r *keyRing) sealAuth(endpointID uuid.UUID, a *storedAuth) (*storedAuth, error) {
	return r.mapAuth(a, func(field, v string) (string, error) { return r.seal(endpointID, field, v) })
}

// openAuth returns a copy of an endpoint's stored auth a with its
// credentials in plaintext; its errors match ErrSecretDecrypt.
func (r *keyRing) openAuth(endpointID uuid.UUID, a *storedAuth) (*storedAuth, error) {
	return r.mapAuth(a, func(field, v string) (string, error) { return r.open(endpointID, field, v) })
}

// mapAuth returns a copy of a with fn applied to each credential it holds.
func (r *keyRing) mapAuth(a *storedAuth, fn func(field, v string) (string, error)) (*storedAuth, error) {
	out := *a
	for _, c := range out.credentials() {
		if *c.value == "" {
			continue
		}
		v, err := fn(c.field, *c.value)
		if err != nil {
			return nil, err
		}
		*c.value = v
	}
	return &out, nil
}

// encodeAuth returns the auth column of an endpoint for checked auth a.
func (o *Outbox) encodeAuth(endpointID uuid.UUID, a *storedAuth) (json.RawMessage, error) {
	sealed, err := o.keys.sealAuth(endpointID, a)
	if err != nil {
		return nil, err
	}
	return sealed.encode()
}

// openStoredAuth decodes an endpoint's auth column and opens its
// credentials.
func (o *Outbox) openStoredAuth(endpointID uuid.UUID, raw json.RawMessage) (*storedAuth, error) {
	a, err := decodeAuth(raw)
	if err != nil {
		return nil, err
	}
	return o.keys.openAuth(endpointID, a)
}
