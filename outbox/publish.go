package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/wharfhq/wharf/internal/dbsqlc"
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
	if len(events) == 0 {
		return nil, nil
	}
	now := o.config.now()
	firstDelay := o.retries.firstDelay()
	ids := make([]uuid.UUID, len(events))
	params := dbsqlc.OutboxPublishParams{
		CreatedAt:      now,
		FirstAttemptAt: now.Add(firstDelay),
		Ids:            make([]string, len(events)),
		Types:          make([]string, len(events)),
		Payloads:       make([][]byte, len(events)),
		OrderingKeys:   make([]string, len(events)),
		Tenants:        make([]string, len(events)),
	}
	for i, event := range events {
		body, err := o.encodeEvent(event, now)
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
	rows, err := o.queries.WithTx(tx).OutboxPublish(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("outbox: publish: %w", err)
	}
	if err := o.insertDeliveryJobs(ctx, tx, publishedJobs(rows), firstDelay); err != nil {
		return nil, err
	}

	o.metrics.published.Add(ctx, int64(len(events)))
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

// pendingDelivery is a delivery that needs a job.
type pendingDelivery struct {
	id, endpointID uuid.UUID
	generation     int32
	orderingKey    string
	attempts       int32 // of earlier generations (a replay's)
	endpoint       endpointShape
}

// endpointShape is what the grouping of deliveries into jobs heeds of
// their endpoint.
type endpointShape struct {
	// maxInFlight is the endpoint's stored cap (0: none).
	maxInFlight int32
	// rateLimited endpoints get a job per delivery: a batch job would hand
	// each over (see batchable).
	rateLimited bool
}

func shapeOf(row *dbsqlc.WharfOutboxEndpoint) endpointShape {
	return endpointShape{maxInFlight: row.MaxInFlight, rateLimited: row.RateLimitPerSecond > 0}
}

// minSpreadBatch bounds how far insertDeliveryJobs spreads an endpoint's
// deliveries over the jobs its cap lets run at once: no more than one job
// per minSpreadBatch deliveries (rounded up).
const minSpreadBatch = 16

// insertDeliveryJobs inserts the jobs of deliveries, to run after delay, in
// one round trip: batch jobs (DeliveryBatchArgs) for the deliveries to one
// endpoint without an ordering key, in their order, and a job of its own
// for any other (and for a batch of one).
//
// An endpoint's n deliveries go to ceil(n/Config.DeliveryBatchSize) batch
// jobs of about the same size, or, when its cap lets more requests run at
// once than that, to as many jobs as its cap (no cap counts as the largest
// one, 1,000) but no more than ceil(n/minSpreadBatch): a burst to an
// endpoint whose requests take a while is then sent by as many workers as
// it allows, while a burst to one that answers at once still costs a job
// per batch.
func (o *Outbox) insertDeliveryJobs(ctx context.Context, tx pgx.Tx, deliveries []pendingDelivery, delay time.Duration) error {
	if len(deliveries) == 0 {
		return nil
	}
	opts := o.jobInsertOpts(delay)
	var params []river.InsertManyParams
	single := func(d pendingDelivery) {
		params = append(params, river.InsertManyParams{
			Args: DeliveryArgs{DeliveryID: d.id, Generation: int(d.generation)}, InsertOpts: opts,
		})
	}
	perEndpoint := make(map[uuid.UUID][]pendingDelivery)
	var endpoints []uuid.UUID
	for _, d := range deliveries {
		if d.orderingKey != "" || d.endpoint.rateLimited || o.config.DeliveryBatchSize == 1 {
			single(d)
			continue
		}
		if _, ok := perEndpoint[d.endpointID]; !ok {
			endpoints = append(endpoints, d.endpointID)
		}
		perEndpoint[d.endpointID] = append(perEndpoint[d.endpointID], d)
	}
	for _, id := range endpoints {
		batch := perEndpoint[id]
		for _, size := range o.batchSizes(len(batch), batch[0].endpoint.maxInFlight) {
			if size == 1 {
				single(batch[0])
			} else {
				args := DeliveryBatchArgs{EndpointID: id, Deliveries: make([]DeliveryRef, size)}
				for i, d := range batch[:size] {
					args.Deliveries[i] = DeliveryRef{DeliveryID: d.id, Generation: int(d.generation), AttemptsBefore: int(d.attempts)}
				}
				params = append(params, river.InsertManyParams{Args: args, InsertOpts: opts})
			}
			batch = batch[size:]
		}
	}
	if _, err := o.inserter.InsertManyFastTx(ctx, tx, params); err != nil {
		return fmt.Errorf("outbox: insert delivery jobs: %w", err)
	}
	return nil
}

// batchSizes splits n deliveries to an endpoint with the stored cap
// maxInFlight among batch jobs, as insertDeliveryJobs says: the sizes, in
// order, which differ by at most one.
func (o *Outbox) batchSizes(n int, maxInFlight int32) []int {
	size := o.config.DeliveryBatchSize
	jobs := (n + size - 1) / size
	parallel := int(maxInFlight)
	if parallel == 0 {
		parallel = maxMaxInFlight
	}
	if jobs < parallel {
		floor := min(minSpreadBatch, size)
		jobs = max(jobs, min(parallel, (n+floor-1)/floor))
	}
	sizes := make([]int, jobs)
	for i := range sizes {
		sizes[i] = n / jobs
		if i < n%jobs {
			sizes[i]++
		}
	}
	return sizes
}

// jobInsertOpts returns the options of delivery jobs that first run after
// delay. MaxAttempts is the schedule's length plus spareRuns: runs past the
// schedule (after a run that recorded nothing: a crash, a panic, a failure
// to record) dead-letter the delivery instead of River discarding the job
// with the delivery still unfinished.
func (o *Outbox) jobInsertOpts(delay time.Duration) *river.InsertOpts {
	opts := &river.InsertOpts{Queue: o.config.Queue, MaxAttempts: len(o.config.RetrySchedule) + spareRuns}
	if delay > 0 {
		opts.ScheduledAt = time.Now().Add(delay)
	}
	return opts
}

func publishedJobs(rows []dbsqlc.OutboxPublishRow) []pendingDelivery {
	jobs := make([]pendingDelivery, len(rows))
	for i, row := range rows {
		jobs[i] = pendingDelivery{
			id: row.ID, endpointID: row.EndpointID, orderingKey: row.OrderingKey,
			endpoint: endpointShape{maxInFlight: row.MaxInFlight, rateLimited: row.RateLimited},
		}
	}
	return jobs
}

// encodeEvent validates event and returns the body to send.
func (o *Outbox) encodeEvent(event *Event, now time.Time) ([]byte, error) {
	if event == nil {
		return nil, fmt.Errorf("%w: nil event", ErrInvalidEvent)
	}
	if err := checkEventType(event.Type); err != nil {
		return nil, err
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
	body, err := marshalJSON(envelope{Type: event.Type, Timestamp: now, Data: data})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	if len(body) > o.config.MaxPayloadBytes {
		return nil, fmt.Errorf("%w: event %q is %d bytes, the limit is %d", ErrPayloadTooLarge, event.Type, len(body), o.config.MaxPayloadBytes)
	}
	return body, nil
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
