package outbox

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/wharfhq/wharf/internal/egress"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/secretbox"
)

// AuthKind names how deliveries authenticate to an endpoint.
type AuthKind string

// Authentication kinds.
const (
	// AuthBearer sends a static token: "Authorization: Bearer <token>".
	AuthBearer AuthKind = outboxtype.AuthBearer
	// AuthBasic sends HTTP basic authentication (RFC 7617).
	AuthBasic AuthKind = outboxtype.AuthBasic
	// AuthOAuth2ClientCredentials fetches an access token with the OAuth 2.0
	// client credentials grant (RFC 6749 section 4.4) and sends it.
	AuthOAuth2ClientCredentials AuthKind = outboxtype.AuthOAuth2ClientCredentials
)

// Bounds of an endpoint's credentials.
const (
	maxCredentialLen = 4096
	maxIdentifierLen = 1024
	maxScopes        = 50
	maxScopeLen      = 256
)

// EndpointAuth is how deliveries authenticate to an endpoint besides the
// Standard Webhooks signature, for receivers behind an API gateway or
// their own auth. Set one of its fields.
//
// Its credentials are secrets: the outbox stores them (in the endpoint's
// row, as it stores the signing secret: encrypted when Config.SecretKeys
// is set), sends them with every attempt, and never returns them from a
// read, logs them or quotes them in an error. Endpoint.Auth describes them
// without their secrets. Printing an EndpointAuth with fmt or slog shows
// only its kind.
type EndpointAuth struct {
	// BearerToken is sent as "Authorization: Bearer <token>": 1 to 4096
	// visible ASCII characters.
	BearerToken string
	// Basic is sent as HTTP basic authentication.
	Basic *BasicAuth
	// OAuth2 fetches an access token with the client credentials grant and
	// sends it as the Authorization header.
	OAuth2 *OAuth2ClientCredentials
}

// BasicAuth is HTTP basic authentication.
type BasicAuth struct {
	// Username is 1 to 1024 bytes of UTF-8 without control characters or a
	// colon.
	Username string
	// Password is at most 4096 bytes of UTF-8 without control characters.
	Password string
}

// OAuth2ClientCredentials is the OAuth 2.0 client credentials grant.
//
// A token is fetched when a delivery to the endpoint first needs one, then
// reused by every delivery the process makes to the endpoint until a tenth
// of its lifetime (at most a minute) is left, when the next delivery
// fetches a new one; a token without expires_in is reused for an hour, and
// one the endpoint answers 401 to is not reused. Each process fetches its
// own tokens. The token request goes through the same SSRF guard, proxy
// and transport as deliveries, within the delivery's timeout. When it
// fails, the attempt fails, and is retried like any other (unless the
// guard refused the token URL: that is final), with an error where
// errors.Is(err, ErrTokenFetch) is true that names the token endpoint's
// answer but never a credential or the response body.
type OAuth2ClientCredentials struct {
	// TokenURL is the authorization server's token endpoint: an absolute
	// http or https URL, checked by the SSRF guard as endpoint URLs are.
	TokenURL string
	// ClientID identifies the client: 1 to 1024 bytes of UTF-8 without
	// control characters.
	ClientID string
	// ClientSecret authenticates the client: 1 to 4096 bytes of UTF-8
	// without control characters.
	ClientSecret string
	// Scopes are requested with the token ("scope"), at most 50. Defaults
	// to none: the server's default scope.
	Scopes []string
	// CredentialsInBody sends the client id and secret as form parameters
	// of the token request instead of HTTP basic authentication, for
	// servers that accept only that. Defaults to false (basic
	// authentication, which RFC 6749 requires servers to support).
	CredentialsInBody bool
}

// ErrTokenFetch is matched (errors.Is) by the error of an attempt that
// failed because no OAuth 2.0 access token could be fetched.
var ErrTokenFetch = egress.ErrTokenFetch

// EndpointAuthInfo describes an endpoint's authentication without its
// secrets.
type EndpointAuthInfo struct {
	// Kind says which authentication the endpoint uses.
	Kind AuthKind
	// Username is the basic authentication user name.
	Username string
	// TokenURL is the OAuth 2.0 token endpoint.
	TokenURL string
	// ClientID is the OAuth 2.0 client id.
	ClientID string
	// Scopes are the OAuth 2.0 scopes requested.
	Scopes []string
}

// String names the kind of authentication, never a credential.
func (a EndpointAuth) String() string {
	switch {
	case a.BearerToken != "":
		return "outbox.EndpointAuth{bearer token}"
	case a.Basic != nil:
		return "outbox.EndpointAuth{basic}"
	case a.OAuth2 != nil:
		return "outbox.EndpointAuth{oauth2 client credentials}"
	}
	return "outbox.EndpointAuth{}"
}

// GoString is String, for %#v.
func (a EndpointAuth) GoString() string { return a.String() }

// LogValue is String, for slog.
func (a EndpointAuth) LogValue() slog.Value { return slog.StringValue(a.String()) }

// String never shows the password.
func (b BasicAuth) String() string { return "outbox.BasicAuth{[redacted]}" }

// GoString is String, for %#v.
func (b BasicAuth) GoString() string { return b.String() }

// LogValue is String, for slog.
func (b BasicAuth) LogValue() slog.Value { return slog.StringValue(b.String()) }

// String never shows the client secret.
func (c OAuth2ClientCredentials) String() string { return "outbox.OAuth2ClientCredentials{[redacted]}" }

// GoString is String, for %#v.
func (c OAuth2ClientCredentials) GoString() string { return c.String() }

// LogValue is String, for slog.
func (c OAuth2ClientCredentials) LogValue() slog.Value { return slog.StringValue(c.String()) }

// checkAuth validates a (nil for none) and returns its stored form, or an
// ErrInvalidEndpoint error that never quotes a credential.
func checkAuth(e *egress.Client, a *EndpointAuth) (*outboxtype.Auth, error) {
	if a == nil {
		return &outboxtype.Auth{}, nil
	}
	set := 0
	for _, ok := range []bool{a.BearerToken != "", a.Basic != nil, a.OAuth2 != nil} {
		if ok {
			set++
		}
	}
	var s *outboxtype.Auth
	var err error
	switch {
	case set > 1:
		err = errors.New("set one of BearerToken, Basic and OAuth2")
	case a.BearerToken != "":
		s, err = checkBearer(a.BearerToken)
	case a.Basic != nil:
		s, err = checkBasic(a.Basic)
	case a.OAuth2 != nil:
		s, err = checkOAuth2(e, a.OAuth2)
	default:
		s = &outboxtype.Auth{}
	}
	if err == nil && secretbox.Sealed(s) {
		err = errors.New(`a credential must not begin with "wharfenc:", the prefix of encrypted values`)
	}
	if err != nil {
		if errors.Is(err, ErrInvalidEndpoint) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: auth: %w", ErrInvalidEndpoint, err)
	}
	return s, nil
}

func checkBearer(token string) (*outboxtype.Auth, error) {
	if len(token) > maxCredentialLen {
		return nil, fmt.Errorf("bearer token longer than %d bytes", maxCredentialLen)
	}
	for i := 0; i < len(token); i++ {
		if token[i] <= ' ' || token[i] >= 0x7f {
			return nil, fmt.Errorf("bearer token must be visible ASCII (byte %d is not)", i)
		}
	}
	return &outboxtype.Auth{Kind: outboxtype.AuthBearer, Token: token}, nil
}

func checkBasic(b *BasicAuth) (*outboxtype.Auth, error) {
	if err := checkCredential("basic username", b.Username, maxIdentifierLen); err != nil {
		return nil, err
	}
	if strings.Contains(b.Username, ":") {
		return nil, errors.New("basic username must not hold a colon")
	}
	if b.Password != "" {
		if err := checkCredential("basic password", b.Password, maxCredentialLen); err != nil {
			return nil, err
		}
	}
	return &outboxtype.Auth{Kind: outboxtype.AuthBasic, Username: b.Username, Password: b.Password}, nil
}

func checkOAuth2(e *egress.Client, c *OAuth2ClientCredentials) (*outboxtype.Auth, error) {
	if err := checkURL("OAuth2 token URL", c.TokenURL); err != nil {
		return nil, err
	}
	if err := literalBlocked(e, c.TokenURL); err != nil {
		return nil, fmt.Errorf("OAuth2 token URL: %w", err)
	}
	if err := checkCredential("OAuth2 client id", c.ClientID, maxIdentifierLen); err != nil {
		return nil, err
	}
	if err := checkCredential("OAuth2 client secret", c.ClientSecret, maxCredentialLen); err != nil {
		return nil, err
	}
	if len(c.Scopes) > maxScopes {
		return nil, fmt.Errorf("more than %d OAuth2 scopes", maxScopes)
	}
	var scopes []string
	for i, scope := range c.Scopes {
		if !validScope(scope) {
			return nil, fmt.Errorf("OAuth2 scope %d must be 1 to %d visible ASCII characters other than \" and \\", i, maxScopeLen)
		}
		if !slices.Contains(scopes, scope) {
			scopes = append(scopes, scope)
		}
	}
	return &outboxtype.Auth{
		Kind: outboxtype.AuthOAuth2ClientCredentials, TokenURL: c.TokenURL, ClientID: c.ClientID, ClientSecret: c.ClientSecret,
		Scopes: scopes, CredentialsInBody: c.CredentialsInBody,
	}, nil
}

// checkCredential accepts 1 to limit bytes of UTF-8 without control
// characters; its error names field, never the value.
func checkCredential(field, v string, limit int) error {
	if v == "" || len(v) > limit {
		return fmt.Errorf("%s must be 1 to %d bytes", field, limit)
	}
	if !validHeaderValue(v) || strings.Contains(v, "\t") {
		return fmt.Errorf("%s holds a control character or is not UTF-8", field)
	}
	return nil
}

// validScope accepts an RFC 6749 scope-token.
func validScope(s string) bool {
	if s == "" || len(s) > maxScopeLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// authInfo describes s without its secrets; nil for none.
func authInfo(s *outboxtype.Auth) *EndpointAuthInfo {
	if s.Kind == "" {
		return nil
	}
	return &EndpointAuthInfo{
		Kind: AuthKind(s.Kind), Username: s.Username, TokenURL: s.TokenURL, ClientID: s.ClientID, Scopes: slices.Clone(s.Scopes),
	}
}
