package portal

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/wharfhq/wharf/outbox"
)

// The API's JSON, as openapi.json describes it: snake case, every field
// present, null for a time or code that is not there.

type endpointHealth struct {
	ConsecutiveFailures int        `json:"consecutive_failures"`
	FailingSince        *time.Time `json:"failing_since"`
	LastSuccessAt       *time.Time `json:"last_success_at"`
	LastFailureAt       *time.Time `json:"last_failure_at"`
	CircuitState        string     `json:"circuit_state"`
}

type endpointJSON struct {
	ID             uuid.UUID       `json:"id"`
	URL            string          `json:"url"`
	Description    string          `json:"description"`
	EventTypes     []string        `json:"event_types"`
	DataFilter     json.RawMessage `json:"data_filter"`
	Disabled       bool            `json:"disabled"`
	DisabledReason string          `json:"disabled_reason"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	Health         endpointHealth  `json:"health"`
}

type endpointWithSecret struct {
	endpointJSON
	Secret string `json:"secret"`
}

// page is a page of a list: data, and the cursor of the next page (null
// on the last).
type page[T any] struct {
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
}

// pageOf makes the page of list, read with limit+1 rows: at most limit of
// them, converted by conv, and the cursor of the last when there were
// more.
func pageOf[In, Out any](list []In, limit int, cursor func(In) string, conv func(In) Out) page[Out] {
	var p page[Out]
	if len(list) > limit {
		list = list[:limit]
		next := cursor(list[limit-1])
		p.NextCursor = &next
	}
	p.Data = make([]Out, len(list))
	for i, v := range list {
		p.Data[i] = conv(v)
	}
	return p
}

func endpointOf(ep *outbox.Endpoint) endpointJSON {
	types := ep.EventTypes
	if types == nil {
		types = []string{}
	}
	return endpointJSON{
		ID: ep.ID, URL: ep.URL, Description: ep.Description, EventTypes: types, DataFilter: ep.DataFilter,
		Disabled: !ep.Enabled, DisabledReason: ep.DisabledReason,
		CreatedAt: ep.CreatedAt.UTC(), UpdatedAt: ep.UpdatedAt.UTC(),
		Health: endpointHealth{
			ConsecutiveFailures: ep.ConsecutiveFailures,
			FailingSince:        utc(ep.FailingSince),
			LastSuccessAt:       utc(ep.LastSuccessAt),
			LastFailureAt:       utc(ep.LastFailureAt),
			CircuitState:        string(ep.CircuitState),
		},
	}
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

type deliveryJSON struct {
	ID             uuid.UUID  `json:"id"`
	EndpointID     uuid.UUID  `json:"endpoint_id"`
	EventID        string     `json:"event_id"`
	WebhookID      string     `json:"webhook_id"`
	EventType      string     `json:"event_type"`
	Status         string     `json:"status"`
	Attempts       int        `json:"attempts"`
	LastStatusCode *int       `json:"last_status_code"`
	LastError      string     `json:"last_error"`
	NextAttemptAt  *time.Time `json:"next_attempt_at"`
	CreatedAt      time.Time  `json:"created_at"`
	SucceededAt    *time.Time `json:"succeeded_at"`
}

func deliveryOf(d *outbox.Delivery) deliveryJSON {
	return deliveryJSON{
		ID: d.ID, EndpointID: d.EndpointID, EventID: d.EventID, WebhookID: d.EventID,
		EventType: d.EventType, Status: string(d.Status), Attempts: d.Attempts,
		LastStatusCode: d.LastStatusCode, LastError: d.LastError,
		NextAttemptAt: utc(d.NextAttemptAt), CreatedAt: d.CreatedAt.UTC(), SucceededAt: utc(d.SucceededAt),
	}
}

type attemptJSON struct {
	Number            int       `json:"number"`
	AttemptedAt       time.Time `json:"attempted_at"`
	Succeeded         bool      `json:"succeeded"`
	StatusCode        *int      `json:"status_code"`
	DurationMS        float64   `json:"duration_ms"`
	ResponseBody      string    `json:"response_body"`
	ResponseTruncated bool      `json:"response_truncated"`
	Error             string    `json:"error"`
}

type deliveryDetail struct {
	deliveryJSON
	AttemptLog []attemptJSON `json:"attempt_log"`
}

func deliveryDetailOf(d *outbox.Delivery, attempts []*outbox.Attempt) deliveryDetail {
	out := deliveryDetail{deliveryJSON: deliveryOf(d), AttemptLog: make([]attemptJSON, len(attempts))}
	for i, a := range attempts {
		out.AttemptLog[i] = attemptJSON{
			Number: a.Number, AttemptedAt: a.AttemptedAt.UTC(), Succeeded: a.Succeeded, StatusCode: a.StatusCode,
			DurationMS:        float64(a.Duration.Microseconds()) / 1000,
			ResponseBody:      strings.ToValidUTF8(string(a.ResponseBody), "\uFFFD"),
			ResponseTruncated: a.ResponseTruncated, Error: a.Error,
		}
	}
	return out
}

type eventTypeJSON struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Example     json.RawMessage `json:"example"`
	Deprecated  bool            `json:"deprecated"`
}

func eventTypeOf(t outbox.EventType) eventTypeJSON {
	out := eventTypeJSON{Name: t.Name, Description: t.Description, Schema: t.Schema, Example: t.Example, Deprecated: t.Deprecated}
	if len(out.Schema) == 0 {
		out.Schema = json.RawMessage("null")
	}
	if len(out.Example) == 0 {
		out.Example = json.RawMessage("null")
	}
	return out
}
