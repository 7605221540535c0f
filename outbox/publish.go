package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/delivery"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/telemetry"
)

// EventIDPrefix starts every event id. The rest is a UUIDv7, so ids sort by
// publication time.
const EventIDPrefix = outboxtype.EventIDPrefix

const (
	maxEventTypeLen   = 256
	maxOrderingKeyLen = 256
	maxTenantLen      = 256
)

// Event is an event to publish.
type Event struct {
	// Type names the event, such as "invoice.paid": 1 to 256 bytes of UTF-8
	// without spaces, control characters or "*". Endpoints subscribe to
	// types.
	Type string
	// Data is the event's payload, encoded with encoding/json; a
	// json.RawMessage is sent as it is (it must be valid JSON).
	Data any
	// OrderingKey, when set, orders deliveries to endpoints created with
	// Ordered: such an endpoint gets an event only after every earlier event
	// with the same key has been delivered or dead-lettered. At most 256
	// bytes of UTF-8 without NUL, as every text Wharf stores.
	//
	// "Earlier" is the order of PublishTx calls (insert order), not of
	// commits: if two transactions publish the same key concurrently and
	// the later PublishTx commits first, its event can be sent first, since
	// the earlier one is not yet visible. For a strict order, serialise the
	// publishing transactions on the key before PublishTx — lock the row of
	// the entity the key names (SELECT … FOR UPDATE, or the UPDATE the
	// transaction makes anyway) before calling PublishTx, so the transaction
	// that publishes first also commits first.
	OrderingKey string
	// Tenant, when set, limits delivery to the endpoints of that tenant;
	// without one, the event goes to endpoints without a tenant. At most 256
	// bytes of UTF-8 without NUL.
	Tenant string
}

// PublishResult describes a published event.
type PublishResult struct {
	// EventID is the event's id, sent as webhook-id on every attempt.
	EventID string
	// Deliveries is how many endpoints the event will be delivered to.
	Deliveries int
}

// envelope is the body sent for an event, as Standard Webhooks recommends.
type envelope struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// PublishTx stores event and, in the same transaction, one delivery job per
// enabled endpoint subscribed to its type. Nothing is sent unless tx
// commits; once it commits, delivery is attempted until it succeeds or the
// retry schedule runs out.
//
// An event PublishTx refuses returns an error where errors.Is(err,
// ErrInvalidEvent) or errors.Is(err, ErrPayloadTooLarge) is true, before
// anything touches tx. Any other error may leave tx aborted: roll it back.
func (o *Outbox) PublishTx(ctx context.Context, tx pgx.Tx, event *Event) (*PublishResult, error) {
	results, err := o.PublishManyTx(ctx, tx, []*Event{event})
	if err != nil {
		return nil, err
	}
	return results[0], nil
}

// PublishManyTx is PublishTx for several events: one statement stores the
// events and their deliveries, one more inserts every job. Results are in
// the order of events. Errors are as for PublishTx; when one event is refused
// none is published.
func (o *Outbox) PublishManyTx(ctx context.Context, tx pgx.Tx, events []*Event) ([]*PublishResult, error) {
	return o.publish(ctx, tx, events, false)
}

// publish is PublishManyTx; operational lets events be of the reserved
// types (the notice job's).
func (o *Outbox) publish(ctx context.Context, tx pgx.Tx, events []*Event, operational bool) ([]*PublishResult, error) {
	if len(events) == 0 {
		return nil, nil
	}
	now := o.config.now()
	firstDelay := o.engine.FirstDelay()
	ids := make([]uuid.UUID, len(events))
	params := dbsqlc.OutboxPublishParams{
		CreatedAt:      now,
		FirstAttemptAt: now.Add(firstDelay),
		Ids:            make([]string, len(events)),
		Types:          make([]string, len(events)),
		Payloads:       make([][]byte, len(events)),
		OrderingKeys:   make([]string, len(events)),
		Tenants:        make([]string, len(events)),
		Filterable:     make([]bool, len(events)),
	}
	for i, event := range events {
		body, err := o.encodeEvent(event, now, operational)
		if err != nil {
			if len(events) > 1 {
				return nil, fmt.Errorf("events[%d]: %w", i, err)
			}
			return nil, err
		}
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("outbox: event id: %w", err)
		}
		ids[i] = id
		params.Ids[i] = id.String()
		params.Types[i] = event.Type
		params.Payloads[i] = body
		params.OrderingKeys[i] = event.OrderingKey
		params.Tenants[i] = event.Tenant
		params.Filterable[i] = jsonbHolds(body)
	}
	if tx == nil {
		return nil, fmt.Errorf("outbox: Publish: nil transaction")
	}

	if err := o.partitions.Ensure(ctx, tx, eventsTable, now); err != nil {
		return nil, err
	}
	ctx, span := o.tracer.Start(ctx, "wharf.outbox.publish", trace.WithAttributes(attribute.Int("wharf.events", len(events))))
	defer span.End()
	params.TraceContext = telemetry.StoredContext(ctx)
	// One event's deliveries get a job each: the statement writes them.
	inline := len(events) == 1
	if inline {
		jobs := o.engine.InlineJobs(firstDelay)
		params.InsertJobs, params.JobKind, params.JobQueue, params.JobMaxAttempts = true, jobs.Kind, jobs.Queue, jobs.MaxAttempts
		params.JobScheduledAt, params.JobState = jobs.ScheduledAt, jobs.State
		params.Notify, params.NotifyTopic, params.NotifyPayload = jobs.Notify, jobs.NotifyTopic, jobs.NotifyPayload
	}
	rows, err := o.queries.WithTx(tx).OutboxPublish(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("outbox: publish: %w", err)
	}
	if !inline {
		if err := o.engine.InsertJobs(ctx, tx, publishedJobs(rows), firstDelay); err != nil {
			return nil, err
		}
	}

	o.engine.CountPublished(ctx, len(events))
	perEvent := make(map[uuid.UUID]int, len(events))
	for _, row := range rows {
		perEvent[row.EventID]++
	}
	results := make([]*PublishResult, len(events))
	for i, id := range ids {
		results[i] = &PublishResult{EventID: outboxtype.FormatEventID(id), Deliveries: perEvent[id]}
	}
	return results, nil
}

// PublishToTx is PublishTx for one endpoint only, whatever its filter: a
// test event, or an event meant for one receiver. The endpoint must be of
// the event's tenant (Event.Tenant) and enabled: otherwise the error is
// one where errors.Is is true for ErrNotFound (no endpoint of that
// tenant: another tenant's endpoint is not told apart from none) or
// ErrEndpointDisabled, and nothing is published. Errors are otherwise
// as for PublishTx.
func (o *Outbox) PublishToTx(ctx context.Context, tx pgx.Tx, endpointID uuid.UUID, event *Event) (*PublishResult, error) {
	now := o.config.now()
	// A test of an operational type is fine: it goes to this endpoint only.
	body, err := o.encodeEvent(event, now, true)
	if err != nil {
		return nil, err
	}
	if tx == nil {
		return nil, fmt.Errorf("outbox: Publish: nil transaction")
	}
	ep, err := endpointRow(ctx, tx, endpointID)
	switch {
	case err != nil:
		return nil, err
	case ep.Tenant != event.Tenant:
		return nil, fmt.Errorf("outbox: endpoint %s: %w", endpointID, ErrNotFound)
	case !ep.Enabled:
		return nil, fmt.Errorf("outbox: endpoint %s: %w", endpointID, ErrEndpointDisabled)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("outbox: event id: %w", err)
	}
	if err := o.partitions.Ensure(ctx, tx, eventsTable, now); err != nil {
		return nil, err
	}
	ctx, span := o.tracer.Start(ctx, "wharf.outbox.publish", trace.WithAttributes(attribute.Int("wharf.events", 1)))
	defer span.End()
	firstDelay := o.engine.FirstDelay()
	rows, err := o.queries.WithTx(tx).OutboxPublishTo(ctx, dbsqlc.OutboxPublishToParams{
		ID: id, CreatedAt: now, Type: event.Type, Payload: body, OrderingKey: event.OrderingKey,
		Tenant: event.Tenant, TraceContext: telemetry.StoredContext(ctx), FirstAttemptAt: now.Add(firstDelay),
		EndpointID: endpointID, Filterable: jsonbHolds(body),
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: publish: %w", err)
	}
	if len(rows) == 0 {
		// Disabled or deleted since endpointRow read it.
		return nil, fmt.Errorf("outbox: endpoint %s: %w", endpointID, ErrEndpointDisabled)
	}
	if err := o.engine.InsertJobs(ctx, tx, publishedJobs([]dbsqlc.OutboxPublishRow{dbsqlc.OutboxPublishRow(rows[0])}), firstDelay); err != nil {
		return nil, err
	}
	o.engine.CountPublished(ctx, 1)
	return &PublishResult{EventID: outboxtype.FormatEventID(id), Deliveries: 1}, nil
}

// shapeOf is what the grouping of an endpoint's deliveries into jobs
// heeds of it.
func shapeOf(row *dbsqlc.WharfOutboxEndpoint) delivery.Shape {
	return delivery.Shape{MaxInFlight: row.MaxInFlight, RateLimited: row.RateLimitPerSecond > 0}
}

// publishedJobs are the deliveries PublishManyTx stored, to give jobs.
func publishedJobs(rows []dbsqlc.OutboxPublishRow) []delivery.Pending {
	jobs := make([]delivery.Pending, len(rows))
	for i, row := range rows {
		jobs[i] = delivery.Pending{
			ID: row.ID, EndpointID: row.EndpointID, OrderingKey: row.OrderingKey,
			Endpoint: delivery.Shape{MaxInFlight: row.MaxInFlight, RateLimited: row.RateLimited},
		}
	}
	return jobs
}

// encodeEvent validates event, against the catalog too, and returns the
// body to send, at most Config.MaxPayloadBytes long.
func (o *Outbox) encodeEvent(event *Event, now time.Time, allowReserved bool) ([]byte, error) {
	maxBytes := o.config.MaxPayloadBytes
	if event == nil {
		return nil, fmt.Errorf("%w: nil event", ErrInvalidEvent)
	}
	if err := checkEventType(event.Type); err != nil {
		return nil, err
	}
	if !allowReserved && reserved(event.Type) {
		return nil, fmt.Errorf("%w: type %q: types starting %q are the outbox's own", ErrInvalidEvent, event.Type, reservedPrefix)
	}
	if len(event.OrderingKey) > maxOrderingKeyLen {
		return nil, fmt.Errorf("%w: ordering key longer than %d bytes", ErrInvalidEvent, maxOrderingKeyLen)
	}
	if len(event.Tenant) > maxTenantLen {
		return nil, fmt.Errorf("%w: tenant longer than %d bytes", ErrInvalidEvent, maxTenantLen)
	}
	if err := checkText("ordering key", event.OrderingKey); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	if err := checkText("tenant", event.Tenant); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	data, err := marshalJSON(event.Data)
	if err != nil {
		return nil, fmt.Errorf("%w: data of %q is not JSON: %w", ErrInvalidEvent, event.Type, err)
	}
	if err := checkData(o.catalog, event.Type, data); err != nil {
		return nil, err
	}
	body, err := marshalJSON(envelope{Type: event.Type, Timestamp: now, Data: data})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	if len(body) > maxBytes {
		return nil, fmt.Errorf("%w: event %q is %d bytes, the limit is %d", ErrPayloadTooLarge, event.Type, len(body), maxBytes)
	}
	return body, nil
}

// jsonbHolds reports whether Postgres's jsonb can hold the JSON text b,
// which a content filter tests (EndpointParams.DataFilter): jsonb refuses
// the escape \u0000, a \uD800–\uDFFF escape that is not half of a
// surrogate pair, and bytes that are not UTF-8, all of which an event's
// data can carry (a Go string with a NUL, a json.RawMessage).
func jsonbHolds(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	// b is valid JSON: a backslash starts an escape in a string.
	for i := bytes.IndexByte(b, '\\'); i >= 0 && i+1 < len(b); {
		next := i + 2
		if b[i+1] == 'u' {
			r := hex4(b, i+2)
			next = i + 6
			switch {
			case r == 0:
				return false
			case r >= 0xd800 && r < 0xdc00:
				if len(b) < i+12 || b[i+6] != '\\' || b[i+7] != 'u' {
					return false
				}
				if low := hex4(b, i+8); low < 0xdc00 || low > 0xdfff {
					return false
				}
				next = i + 12
			case r >= 0xdc00 && r <= 0xdfff:
				return false
			}
		}
		j := bytes.IndexByte(b[min(next, len(b)):], '\\')
		if j < 0 {
			break
		}
		i = next + j
	}
	return true
}

// hex4 is the value of the 4 hex digits at b[i:], or -1.
func hex4(b []byte, i int) int {
	if len(b) < i+4 {
		return -1
	}
	v, err := strconv.ParseUint(string(b[i:i+4]), 16, 16)
	if err != nil {
		return -1
	}
	return int(v)
}

// marshalJSON is json.Marshal without HTML escaping: the body is for
// machines, and receivers see the characters the application published.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func checkEventType(t string) error {
	if t == "" || len(t) > maxEventTypeLen {
		return fmt.Errorf("%w: type must be 1 to %d bytes", ErrInvalidEvent, maxEventTypeLen)
	}
	if i := strings.IndexFunc(t, func(r rune) bool {
		return r == '*' || unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar
	}); i >= 0 {
		return fmt.Errorf("%w: type %q has a space, control character or \"*\" at byte %d", ErrInvalidEvent, t, i)
	}
	return nil
}

// ParseEventID returns the UUID of an event id made by PublishTx. A malformed
// id returns an error where errors.Is(err, ErrNotFound) is true: no event
// has it.
func ParseEventID(id string) (uuid.UUID, error) {
	rest, ok := strings.CutPrefix(id, EventIDPrefix)
	if !ok {
		return uuid.Nil, fmt.Errorf("%w: event id %q does not start with %s", ErrNotFound, id, EventIDPrefix)
	}
	u, err := uuid.Parse(rest)
	if err != nil || len(rest) != 36 {
		return uuid.Nil, fmt.Errorf("%w: malformed event id %q", ErrNotFound, id)
	}
	return u, nil
}
