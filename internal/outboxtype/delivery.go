package outboxtype

import (
	"encoding/json"
	"fmt"
	"net/http"
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
