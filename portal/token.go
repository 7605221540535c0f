package portal

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// tokenPrefix starts every token, so a leaked one is easy to recognise
// (and to scan for).
const tokenPrefix = "wpt_"

// MinKeyBytes is the shortest token key.
const MinKeyBytes = 32

// maxTokenLen bounds a token read: a 256-byte tenant of characters JSON
// escapes six-fold stays below it.
const maxTokenLen = 8192

// MaxTokenTTL bounds a token's life: tokens are meant to be minted per
// session or per link, never stored.
const MaxTokenTTL = 30 * 24 * time.Hour

// maxTenantLen is the outbox's limit on a tenant.
const maxTenantLen = 256

// Errors of tokens.
var (
	// ErrInvalidToken is returned for a token that is malformed, was not
	// signed by one of the keys, or has expired.
	ErrInvalidToken = errors.New("portal: invalid token")
	// ErrInvalidKey is returned for a key shorter than MinKeyBytes, or
	// text ParseKey cannot read.
	ErrInvalidKey = errors.New("portal: invalid key")
)

// Token is what a portal token grants: one tenant's endpoints and
// deliveries until Expires, and only reading them when ReadOnly.
type Token struct {
	// Tenant is the tenant, as in outbox.EndpointParams.Tenant: 1 to 256
	// bytes of UTF-8 without control characters.
	Tenant string
	// Expires is when the token stops working; at most MaxTokenTTL after
	// it is minted.
	Expires time.Time
	// ReadOnly refuses every change (403).
	ReadOnly bool
}

// claims is a token's signed payload.
type claims struct {
	Tenant   string `json:"tenant"`
	Expires  int64  `json:"exp"`
	ReadOnly bool   `json:"ro,omitempty"`
}

// ParseKey reads a token key: the standard base64 of at least MinKeyBytes
// random bytes, as `openssl rand -base64 32` prints. Surrounding white
// space is ignored.
func ParseKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("%w: not standard base64", ErrInvalidKey)
	}
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("%w: %d bytes, at least %d are needed", ErrInvalidKey, len(key), MinKeyBytes)
	}
	return key, nil
}

// NewToken mints a token for t, signed with key (HMAC-SHA256). Give it to
// the tenant as `Authorization: Bearer <token>`, or in a portal link
// (Handler.Link).
func NewToken(key []byte, t Token) (string, error) {
	return newToken(key, t, time.Now())
}

func newToken(key []byte, t Token, now time.Time) (string, error) {
	if len(key) < MinKeyBytes {
		return "", fmt.Errorf("%w: %d bytes, at least %d are needed", ErrInvalidKey, len(key), MinKeyBytes)
	}
	if err := checkTenant(t.Tenant); err != nil {
		return "", err
	}
	if t.Expires.Sub(now) < time.Second {
		// Expiry is kept in whole seconds: a shorter life would be over
		// before the token is used.
		return "", errors.New("portal: a token lives at least a second")
	}
	if t.Expires.Sub(now) > MaxTokenTTL {
		return "", fmt.Errorf("portal: a token lives at most %s", MaxTokenTTL)
	}
	payload, err := json.Marshal(claims{Tenant: t.Tenant, Expires: t.Expires.Unix(), ReadOnly: t.ReadOnly})
	if err != nil {
		return "", err
	}
	body := base64.RawURLEncoding.EncodeToString(payload)
	return tokenPrefix + body + "." + base64.RawURLEncoding.EncodeToString(sign(key, body)), nil
}

// checkTenant accepts what the outbox stores as a tenant, but not "" (no
// tenant's endpoints are the application's own).
func checkTenant(tenant string) error {
	if tenant == "" || len(tenant) > maxTenantLen || !utf8.ValidString(tenant) ||
		strings.ContainsFunc(tenant, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("portal: a tenant is 1 to %d bytes of UTF-8 without control characters", maxTenantLen)
	}
	return nil
}

func sign(key []byte, body string) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("wharf-portal-token\x00"))
	mac.Write([]byte(body))
	return mac.Sum(nil)
}

// parseToken returns what token grants when one of keys signed it and it
// has not expired at now.
func parseToken(keys [][]byte, token string, now time.Time) (*Token, error) {
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok || len(token) > maxTokenLen {
		return nil, ErrInvalidToken
	}
	body, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return nil, ErrInvalidToken
	}
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return nil, ErrInvalidToken
	}
	signed := false
	for _, key := range keys {
		if hmac.Equal(mac, sign(key, body)) {
			signed = true
			break
		}
	}
	if !signed {
		return nil, ErrInvalidToken
	}
	payload, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return nil, ErrInvalidToken
	}
	var c claims
	if err := json.Unmarshal(payload, &c); err != nil || checkTenant(c.Tenant) != nil {
		return nil, ErrInvalidToken
	}
	expires := time.Unix(c.Expires, 0)
	if !now.Before(expires) {
		return nil, fmt.Errorf("%w: expired", ErrInvalidToken)
	}
	return &Token{Tenant: c.Tenant, Expires: expires, ReadOnly: c.ReadOnly}, nil
}

// NewLink returns a portal link for t: base, the portal's URL as the
// tenant's browser reaches it (such as "https://app.example.com/portal/"),
// with a token in its query. Opening it trades the token for a cookie and
// drops it from the address bar. Anyone holding the link holds the token
// until it expires: keep the TTL short (minutes) and send it only over
// HTTPS.
func NewLink(key []byte, base string, t Token) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("portal: the base %q is not an absolute http or https URL", base)
	}
	token, err := NewToken(key, t)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("token", token)
	u.RawQuery = q.Encode()
	return u.String(), nil
}
