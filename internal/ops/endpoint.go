package ops

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/shared"
	"github.com/wharfhq/wharf/outbox"
)

// DeletedEndpoint names an endpoint that no longer exists, by its id.
func DeletedEndpoint(id uuid.UUID) string { return id.String() + " (deleted)" }

// NextAttempt says when a delivery's next attempt may go: its own
// NextAttemptAt, unless its endpoint's circuit holds it. An open circuit
// holds it until the circuit's cool-down ends (CircuitOpenUntil), a
// half-open one until the endpoint's probe answers (at stays the
// delivery's own time, which may be past). held reports either.
func NextAttempt(d *outbox.Delivery, circuit outbox.CircuitState, openUntil *time.Time) (at *time.Time, held bool) {
	at = d.NextAttemptAt
	if d.Status != outbox.StatusPending && d.Status != outbox.StatusRetrying {
		return at, false
	}
	switch circuit {
	case outbox.CircuitOpen:
		if openUntil != nil && (at == nil || openUntil.After(*at)) {
			at = openUntil
		}
		return at, true
	case outbox.CircuitHalfOpen:
		return at, true
	}
	return at, false
}

// DeliveryLine is a delivery as the operator's lists show it: beside the
// delivery, its event's type, its endpoint's redacted URL and when its next
// attempt may go.
type DeliveryLine struct {
	*outbox.Delivery
	// EventType is the event's type; empty when the event is gone.
	EventType string
	// Endpoint names the endpoint: its URL, redacted (RedactURL), or its
	// id and "(deleted)".
	Endpoint string
	// NextAttempt and HeldByCircuit are NextAttempt's answers.
	NextAttempt   *time.Time
	HeldByCircuit bool
}

// DeliveryLines reads what lists show beside each delivery of a page: two
// queries, whatever the page's length.
func DeliveryLines(ctx context.Context, q *dbsqlc.Queries, ds []*outbox.Delivery) ([]*DeliveryLine, error) {
	lines := make([]*DeliveryLine, len(ds))
	if len(ds) == 0 {
		return lines, nil
	}
	var endpointIDs, eventIDs []uuid.UUID
	first, last := ds[0].EventCreatedAt, ds[0].EventCreatedAt
	for _, d := range ds {
		endpointIDs = append(endpointIDs, d.EndpointID)
		if id, err := outbox.ParseEventID(d.EventID); err == nil {
			eventIDs = append(eventIDs, id)
		}
		first, last = minTime(first, d.EventCreatedAt), maxTime(last, d.EventCreatedAt)
	}
	endpoints, err := q.DashboardEndpointsByID(ctx, endpointIDs)
	if err != nil {
		return nil, err
	}
	types, err := q.DashboardEventTypes(ctx, dbsqlc.DashboardEventTypesParams{
		First: first, Last: last, Ids: eventIDs,
	})
	if err != nil {
		return nil, err
	}
	byEndpoint := make(map[uuid.UUID]*dbsqlc.DashboardEndpointsByIDRow, len(endpoints))
	for i := range endpoints {
		byEndpoint[endpoints[i].ID] = &endpoints[i]
	}
	typeOf := make(map[uuid.UUID]string, len(types))
	for _, t := range types {
		typeOf[t.ID] = t.Type
	}
	for i, d := range ds {
		line := &DeliveryLine{Delivery: d, Endpoint: DeletedEndpoint(d.EndpointID), NextAttempt: d.NextAttemptAt}
		if id, err := outbox.ParseEventID(d.EventID); err == nil {
			line.EventType = typeOf[id]
		}
		if ep := byEndpoint[d.EndpointID]; ep != nil {
			line.Endpoint = shared.RedactURL(ep.Url)
			line.NextAttempt, line.HeldByCircuit = NextAttempt(d, outbox.CircuitState(ep.CircuitState), ep.CircuitOpenUntil)
		}
		lines[i] = line
	}
	return lines, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
