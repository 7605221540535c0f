// Package secretbox keeps the outbox's endpoint secrets sealed at rest: a
// key ring that seals signing secrets and auth credentials with its
// current key and opens them with any of its keys, and the re-encryption
// of every endpoint's stored values under the current key.
//
// With a ring of keys, an endpoint's signing secrets (the secret and
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
// and sealed by Reencrypt. The auth column's other members (kind, user
// name, token URL, client id, scopes) are no secrets (Endpoint.Auth
// returns them) and stay in the clear, so reads that describe an endpoint
// need no key.
package secretbox

import (
	"cmp"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/wharfhq/wharf/internal/outboxtype"
)

// Sealed values.
const (
	sealedPrefix = "wharfenc:"
	sealedV1     = sealedPrefix + "v1:"
	// KeyBytes is the length of a key: AES-256.
	KeyBytes = 32
	// MaxKeyIDLen bounds a key's ID.
	MaxKeyIDLen   = 64
	gcmNonceBytes = 12
	gcmTagBytes   = 16
	// maxSealedLen bounds what the parser decodes: database content, which
	// Wharf writes far shorter (credentials are at most 4 KiB).
	maxSealedLen = 64 << 10
)

// FieldSecret is the field both signing secret columns are bound to.
const FieldSecret = "secret"

// ErrDecrypt is matched (errors.Is) by the error of opening a value that
// cannot be decrypted (outbox.ErrSecretDecrypt).
var ErrDecrypt = errors.New("outbox: endpoint secret cannot be decrypted")

// Key is a key of the ring.
type Key struct {
	// ID names the key in every value it seals (ValidKeyID).
	ID string
	// Key is the AES-256 key (KeyBytes).
	Key []byte
}

// DefaultReencryptBatch is Config.ReencryptBatch's default.
const DefaultReencryptBatch = 100

// Config configures a Ring.
type Config struct {
	// Keys are the ring's keys, Keys[0] the current one. Defaults to none:
	// the ring stores plaintext.
	Keys []Key
	// ReencryptBatch is how many endpoints one Reencrypt transaction locks
	// and rewrites. Defaults to DefaultReencryptBatch.
	ReencryptBatch int
}

// validate checks c's keys.
func (c *Config) validate() error {
	var problems []error
	CheckKeys(c.Keys, func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) })
	if c.ReencryptBatch < 1 {
		problems = append(problems, errors.New("ReencryptBatch must be positive"))
	}
	return errors.Join(problems...)
}

// ValidKeyID accepts 1 to 64 ASCII letters, digits, '.', '_' or '-': a
// key ID is quoted in errors and stands between colons in sealed values.
func ValidKeyID(id string) bool {
	if id == "" || len(id) > MaxKeyIDLen {
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

// CheckKeys adds the problems of a ring's keys to bad, naming each as
// Config.SecretKeys[i]; it never quotes a key.
func CheckKeys(keys []Key, bad func(format string, args ...any)) {
	seen := make(map[string]int, len(keys))
	for i, k := range keys {
		if !ValidKeyID(k.ID) {
			bad("SecretKeys[%d].ID must be 1 to %d letters, digits, '.', '_' or '-'", i, MaxKeyIDLen)
			continue
		}
		if len(k.Key) != KeyBytes {
			bad("SecretKeys[%d] (ID %q): Key must be %d bytes (AES-256), is %d", i, k.ID, KeyBytes, len(k.Key))
		}
		if j, dup := seen[k.ID]; dup {
			bad("SecretKeys[%d]: ID %q repeats SecretKeys[%d]'s (each key needs an ID of its own)", i, k.ID, j)
			continue
		}
		seen[k.ID] = i
	}
}

// Ring seals endpoint secrets with its current key and opens them with
// any of its keys. A ring without keys stores plaintext.
type Ring struct {
	current        string
	aeads          map[string]cipher.AEAD
	reencryptBatch int
}

// New builds the ring of cfg's keys (nil: none), Keys[0] current.
func New(cfg *Config) (*Ring, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.ReencryptBatch = cmp.Or(c.ReencryptBatch, DefaultReencryptBatch)
	if err := c.validate(); err != nil {
		return nil, err
	}
	r := &Ring{aeads: make(map[string]cipher.AEAD, len(c.Keys)), reencryptBatch: c.ReencryptBatch}
	for _, k := range c.Keys {
		block, err := aes.NewCipher(k.Key)
		if err != nil {
			return nil, fmt.Errorf("SecretKeys %q: %v", k.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("SecretKeys %q: %v", k.ID, err)
		}
		r.aeads[k.ID] = aead
	}
	if len(c.Keys) > 0 {
		r.current = c.Keys[0].ID
	}
	return r, nil
}

// Enabled reports whether the ring seals what it stores.
func (r *Ring) Enabled() bool { return r.current != "" }

// currentPrefix is the prefix of every value sealed with the current key.
func (r *Ring) currentPrefix() string { return sealedV1 + r.current + ":" }

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
	if !ok || !ValidKeyID(keyID) {
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

// Seal returns the stored form of plaintext, the field of an endpoint:
// sealed with the current key, or plaintext without keys.
func (r *Ring) Seal(endpointID uuid.UUID, field, plaintext string) (string, error) {
	if !r.Enabled() {
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

// Open returns the plaintext of a stored value of an endpoint's field:
// plaintext as it is, a sealed value decrypted with the ring's key of its
// id. Its errors match ErrDecrypt.
func (r *Ring) Open(endpointID uuid.UUID, field, stored string) (string, error) {
	s, err := parseSealed(stored)
	if err != nil {
		return "", openError(endpointID, field, err.Error())
	}
	if s == nil {
		return stored, nil
	}
	aead, ok := r.aeads[s.keyID]
	switch {
	case !ok && !r.Enabled():
		return "", openError(endpointID, field, fmt.Sprintf("sealed with key %q, but Config.SecretKeys is empty", s.keyID))
	case !ok:
		return "", openError(endpointID, field, fmt.Sprintf("sealed with key %q, which Config.SecretKeys lacks", s.keyID))
	}
	nonce, ciphertext := s.data[:gcmNonceBytes], s.data[gcmNonceBytes:]
	plaintext, err := aead.Open(nil, nonce, ciphertext, additionalData(s.header(), endpointID, field))
	if err != nil {
		return "", openError(endpointID, field, fmt.Sprintf(
			"fails authentication under key %q: altered, copied from another endpoint or field, or sealed by another key of that ID", s.keyID))
	}
	return string(plaintext), nil
}

func openError(endpointID uuid.UUID, field, why string) error {
	return fmt.Errorf("%w: endpoint %s %s: %s", ErrDecrypt, endpointID, fieldName(field), why)
}

// fieldName says what a field is, for errors.
func fieldName(field string) string {
	switch field {
	case FieldSecret:
		return "signing secret"
	case outboxtype.FieldAuthToken:
		return "bearer token"
	case outboxtype.FieldAuthPassword:
		return "basic password"
	case outboxtype.FieldAuthClientSecret:
		return "OAuth2 client secret"
	}
	return field
}

// isCurrent reports whether stored needs no reencryption: sealed with the
// current key, or plaintext without keys ("" included: no credential).
func (r *Ring) isCurrent(stored string) bool {
	if !r.Enabled() || stored == "" {
		return true
	}
	return strings.HasPrefix(stored, r.currentPrefix())
}

// Sealed reports whether a of checked auth holds a credential that reads
// as a sealed value: refused, so that a stored value with the prefix is
// always one Wharf sealed.
func Sealed(a *outboxtype.Auth) bool {
	for _, c := range a.Credentials() {
		if strings.HasPrefix(*c.Value, sealedPrefix) {
			return true
		}
	}
	return false
}

// SealAuth returns a copy of checked auth a of an endpoint with its
// credentials sealed.
func (r *Ring) SealAuth(endpointID uuid.UUID, a *outboxtype.Auth) (*outboxtype.Auth, error) {
	return a.MapCredentials(func(field, v string) (string, error) { return r.Seal(endpointID, field, v) })
}

// OpenAuth returns a copy of an endpoint's stored auth a with its
// credentials in plaintext; its errors match ErrDecrypt.
func (r *Ring) OpenAuth(endpointID uuid.UUID, a *outboxtype.Auth) (*outboxtype.Auth, error) {
	return a.MapCredentials(func(field, v string) (string, error) { return r.Open(endpointID, field, v) })
}

// EncodeAuth returns the auth column of an endpoint for checked auth a:
// its credentials sealed.
func (r *Ring) EncodeAuth(endpointID uuid.UUID, a *outboxtype.Auth) (json.RawMessage, error) {
	sealed, err := r.SealAuth(endpointID, a)
	if err != nil {
		return nil, err
	}
	return sealed.Encode()
}

// DecodeAuth decodes an endpoint's auth column and opens its credentials.
func (r *Ring) DecodeAuth(endpointID uuid.UUID, raw json.RawMessage) (*outboxtype.Auth, error) {
	a, err := outboxtype.DecodeAuth(raw)
	if err != nil {
		return nil, err
	}
	return r.OpenAuth(endpointID, a)
}
