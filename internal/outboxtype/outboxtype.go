// Package outboxtype holds the leaf types the outbox's engines share, so
// that none of them imports another to reach one: the attempt value
// (Delivery: a delivery as a worker loaded it, which the gate, admission,
// egress and the record read), an endpoint's stored authentication (Auth,
// which the outbox checks, secretbox seals and egress sends), the stored
// forms of statuses, circuit states, event ids and headers. It imports
// nothing of Wharf's.
package outboxtype

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"
)

// Delivery statuses, as the deliveries' status column stores them
// (outbox.DeliveryStatus).
const (
	StatusPending   = "pending"
	StatusRetrying  = "retrying"
	StatusSucceeded = "succeeded"
	StatusDead      = "dead"
)

// Circuit states, as the endpoints' circuit_state column stores them
// (outbox.CircuitState).
const (
	CircuitClosed   = "closed"
	CircuitOpen     = "open"
	CircuitHalfOpen = "half_open"
)

// EventIDPrefix starts every event id; the rest is the event's UUIDv7.
const EventIDPrefix = "evt_"

// FormatEventID returns the event id (the webhook-id) of the event whose
// row id is id.
func FormatEventID(id uuid.UUID) string { return EventIDPrefix + id.String() }

// Delivery is everything an attempt of a delivery needs, as a worker
// loaded it in one statement: the delivery, its endpoint and its event.
// The outbox's delivery engine makes it from the row, once; the gate,
// admission, egress and the record read it.
type Delivery struct {
	ID             uuid.UUID
	Seq            int64
	EventID        string // formatted (FormatEventID): the webhook-id
	EventCreatedAt time.Time
	EndpointID     uuid.UUID
	OrderingKey    string
	Status         string
	Attempts       int32
	Generation     int32
	// ThrottledUntil is the delivery's turn for a rate limit token, by
	// the database's clock.
	ThrottledUntil *time.Time

	URL                     string
	Secret                  string // sealed when the outbox has a key ring
	PreviousSecret          *string
	PreviousSecretExpiresAt *time.Time
	MaxInFlight             int32 // 0: no cap
	Timeout                 time.Duration
	Ordered                 bool
	Enabled                 bool
	Headers                 http.Header
	Auth                    json.RawMessage // sealed credentials
	RateLimitPerSecond      float64
	CircuitState            string
	CircuitOpenUntil        *time.Time
	CircuitProbeExpiresAt   *time.Time
	// EndpointVersion is the endpoint's version as loaded: a record that
	// sees another tells a batch job the endpoint changed.
	EndpointVersion int64

	// Payload is the event's body, nil when retention dropped or
	// scrubbed it.
	Payload      []byte
	TraceContext string
	// DBNow is the database's clock as the delivery was loaded: circuit
	// and rate limit times are measured against it, never a node's clock.
	DBNow time.Time
}

// EncodeHeaders returns the stored form of an endpoint's checked headers.
func EncodeHeaders(h http.Header) (json.RawMessage, error) {
	if h == nil {
		h = http.Header{}
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("outbox: encode headers: %w", err)
	}
	return b, nil
}

// DecodeHeaders reads stored headers; an empty or unreadable column is no
// headers (never a failure to read the endpoint).
func DecodeHeaders(raw json.RawMessage) http.Header {
	h := http.Header{}
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &h)
	}
	return h
}

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
