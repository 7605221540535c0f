package outboxtype

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Authentication kinds, as the auth column stores them (outbox.AuthKind).
const (
	AuthBearer                  = "bearer"
	AuthBasic                   = "basic"
	AuthOAuth2ClientCredentials = "oauth2_client_credentials"
)

// Fields of Auth's credentials, which a sealed value is bound to (its
// additional authenticated data, see secretbox).
const (
	FieldAuthToken        = "auth.token"
	FieldAuthPassword     = "auth.password"
	FieldAuthClientSecret = "auth.client_secret"
)

// Auth is an endpoint's authentication as its auth column holds it; the
// zero value is none. Its credentials (Token, Password, ClientSecret) are
// sealed at rest when the outbox has a key ring.
type Auth struct {
	Kind              string   `json:"kind,omitempty"`
	Token             string   `json:"token,omitempty"`
	Username          string   `json:"username,omitempty"`
	Password          string   `json:"password,omitempty"`
	TokenURL          string   `json:"token_url,omitempty"`
	ClientID          string   `json:"client_id,omitempty"`
	ClientSecret      string   `json:"client_secret,omitempty"`
	Scopes            []string `json:"scopes,omitempty"`
	CredentialsInBody bool     `json:"credentials_in_body,omitempty"`
}

// String never shows a credential.
func (a *Auth) String() string { return "auth(" + a.Kind + ")" }

// DecodeAuth reads an endpoint's auth column.
func DecodeAuth(raw json.RawMessage) (*Auth, error) {
	a := &Auth{}
	if len(raw) == 0 {
		return a, nil
	}
	if err := json.Unmarshal(raw, a); err != nil {
		return nil, errors.New("outbox: the endpoint's stored auth does not decode")
	}
	return a, nil
}

// Encode returns the stored form of a.
func (a *Auth) Encode() (json.RawMessage, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("outbox: encode auth: %w", err)
	}
	return b, nil
}

// Credential is a secret member of an Auth and its field.
type Credential struct {
	Field string
	Value *string
}

// Credentials lists the secret members of a.
func (a *Auth) Credentials() []Credential {
	return []Credential{
		{FieldAuthToken, &a.Token},
		{FieldAuthPassword, &a.Password},
		{FieldAuthClientSecret, &a.ClientSecret},
	}
}

// MapCredentials returns a copy of a with fn applied to each credential it
// holds.
func (a *Auth) MapCredentials(fn func(field, v string) (string, error)) (*Auth, error) {
	out := *a
	for _, c := range out.Credentials() {
		if *c.Value == "" {
			continue
		}
		v, err := fn(c.Field, *c.Value)
		if err != nil {
			return nil, err
		}
		*c.Value = v
	}
	return &out, nil
}

// Equal reports whether a and b authenticate alike.
func (a *Auth) Equal(b *Auth) bool {
	return a.Kind == b.Kind && a.Token == b.Token && a.Username == b.Username && a.Password == b.Password &&
		a.TokenURL == b.TokenURL && a.ClientID == b.ClientID && a.ClientSecret == b.ClientSecret &&
		slices.Equal(a.Scopes, b.Scopes) && a.CredentialsInBody == b.CredentialsInBody
}

// Fingerprint identifies a's credentials without keeping them in the clear.
func (a *Auth) Fingerprint() [sha256.Size]byte {
	b, _ := json.Marshal(a)
	return sha256.Sum256(b)
}
