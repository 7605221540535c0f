// Package delivery works the outbox's delivery jobs: the River workers of
// a delivery's own job (Args) and of a batch job (BatchArgs), which pass
// each loaded delivery through one gate, admit it (internal/admission),
// send it (internal/egress) and record the attempt with the delivery's
// new state and its endpoint's health; the retry schedule; the hand-over
// of deliveries from a batch job to new jobs; the insertion of every
// delivery job; and Rescue, which settles the deliveries no job will
// attempt.
//
// A delivery's attempt, from the worker's Work to its record, reads two
// files of this package:
//
//	attempt.go  Work: load (group commit) into the attempt value, gate,
//	            admission.Gate.Admit, send (egress.Client.Send, in a span)
//	record.go   settle: the record (group commit), hooks, logs, metrics
//
// and batch.go, handover.go, jobs.go and rescue.go what a batch job, a
// hand-over, an insertion and Rescue add.
//
// The public outbox package builds the Engine from its Config (New) and
// converts at the seam: its job args are aliases of this package's, and
// its hooks receive its own DeadDelivery and DisabledEndpoint.
package delivery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/wharfhq/wharf/internal/admission"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/egress"
	"github.com/wharfhq/wharf/internal/groupcommit"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/partition"
	"github.com/wharfhq/wharf/internal/secretbox"
	"github.com/wharfhq/wharf/internal/shared"
	"github.com/wharfhq/wharf/internal/telemetry"
)

// Defaults of the Config fields that have one (outbox.Default… re-exports
// them).
const (
	DefaultQueue              = "wharf_outbox"
	DefaultRetryJitter        = 0.2
	DefaultThrottledRetryMin  = time.Minute
	DefaultRetryAfterMax      = time.Hour
	DefaultMaxEndpointTimeout = time.Minute
	DefaultDeliveryBatchSize  = 64
	DefaultDeliveryBatchSpan  = time.Second
	DefaultDisableAfter       = 5 * 24 * time.Hour
	DefaultCircuitThreshold   = 10
)

// DefaultRetrySchedule is Config.RetrySchedule's default (outbox's
// DefaultRetrySchedule).
var DefaultRetrySchedule = []time.Duration{
	0,
	5 * time.Second,
	5 * time.Minute,
	30 * time.Minute,
	2 * time.Hour,
	5 * time.Hour,
	10 * time.Hour,
	10 * time.Hour,
}

// Config configures an Engine. Its settings are outbox.Config's of the
// same names, which document them (-1 included: it disables what it does
// there); the engines it drives are built by the caller.
type Config struct {
	Queue              string
	RetrySchedule      []time.Duration
	RetryJitter        float64
	ThrottledRetryMin  time.Duration
	RetryAfterMax      time.Duration
	MaxEndpointTimeout time.Duration
	DeliveryBatchSize  int
	DeliveryBatchSpan  time.Duration
	DisableAfter       time.Duration
	// CircuitBreakerThreshold, CircuitBreakerCooldown and
	// CircuitBreakerMaxCooldown are what the record opens a circuit by.
	CircuitBreakerThreshold   int
	CircuitBreakerCooldown    time.Duration
	CircuitBreakerMaxCooldown time.Duration

	// OnDead and OnEndpointDisabled are the application's hooks; a panic
	// in them is recovered and logged.
	OnDead             func(ctx context.Context, d Dead)
	OnEndpointDisabled func(ctx context.Context, e Disabled)
	// OnNotice is called after a statement of the engine's committed a
	// change that leaves an operational notice (an endpoint disabled, its
	// circuit opened or closed, a delivery dead): the outbox publishes
	// them. Not called in the caller's transaction.
	OnNotice func(ctx context.Context)

	Logger         *slog.Logger
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Now            func() time.Time

	// Keys opens the endpoints' secrets; Egress sends; Admission admits.
	// Required.
	Keys      *secretbox.Ring
	Egress    *egress.Client
	Admission *admission.Gate
}

// Dead is what Config.OnDead learns of a delivery that died
// (outbox.DeadDelivery).
type Dead struct {
	DeliveryID uuid.UUID
	EndpointID uuid.UUID
	EventID    string
	Reason     string
}

// Disabled is what Config.OnEndpointDisabled learns of an endpoint an
// attempt disabled (outbox.DisabledEndpoint).
type Disabled struct {
	EndpointID uuid.UUID
	Reason     string
}

// withDefaults returns a copy of c with every default filled in.
func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	out.Queue = cmp.Or(out.Queue, DefaultQueue)
	if out.RetrySchedule == nil {
		out.RetrySchedule = DefaultRetrySchedule
	}
	out.RetrySchedule = slices.Clone(out.RetrySchedule)
	out.RetryJitter = cmp.Or(out.RetryJitter, DefaultRetryJitter)
	out.ThrottledRetryMin = cmp.Or(out.ThrottledRetryMin, DefaultThrottledRetryMin)
	out.RetryAfterMax = cmp.Or(out.RetryAfterMax, DefaultRetryAfterMax)
	out.MaxEndpointTimeout = cmp.Or(out.MaxEndpointTimeout, DefaultMaxEndpointTimeout)
	out.DeliveryBatchSize = cmp.Or(out.DeliveryBatchSize, DefaultDeliveryBatchSize)
	out.DeliveryBatchSpan = cmp.Or(out.DeliveryBatchSpan, DefaultDeliveryBatchSpan)
	out.DisableAfter = cmp.Or(out.DisableAfter, DefaultDisableAfter)
	out.CircuitBreakerThreshold = cmp.Or(out.CircuitBreakerThreshold, DefaultCircuitThreshold)
	out.CircuitBreakerCooldown = cmp.Or(out.CircuitBreakerCooldown, admission.DefaultCircuitBreakerCooldown)
	out.CircuitBreakerMaxCooldown = cmp.Or(out.CircuitBreakerMaxCooldown,
		max(admission.DefaultCircuitBreakerMaxCooldown, out.CircuitBreakerCooldown))
	out.Logger = cmp.Or(out.Logger, slog.Default())
	if out.Now == nil {
		out.Now = time.Now
	}
	return out
}

// validate checks what the engine cannot work without; outbox.Config's
// validation has checked every setting already.
func (c *Config) validate() error {
	switch {
	case c.Keys == nil || c.Egress == nil || c.Admission == nil:
		return errors.New("delivery: Config.Keys, Egress and Admission are required")
	case len(c.RetrySchedule) == 0:
		return errors.New("delivery: Config.RetrySchedule is empty")
	case c.DeliveryBatchSize < 1:
		return errors.New("delivery: Config.DeliveryBatchSize must be positive")
	}
	return nil
}

// Engine works the outbox's delivery jobs. It is safe for concurrent use.
type Engine struct {
	// config is the engine's settings, defaults filled in (tests tune it).
	config     Config
	pool       *pgxpool.Pool
	queries    *dbsqlc.Queries
	inserter   *river.Client[pgx.Tx]
	partitions *partition.Cache
	keys       *secretbox.Ring
	egress     *egress.Client
	admission  *admission.Gate
	retries    *retryPlan
	metrics    *metrics
	tracer     trace.Tracer
	// loads and records are group commits: the deliveries a node works at
	// once load and record in one statement (or one pipelined
	// transaction) for all who ask while the previous ones are in the
	// database (see attempt.go and record.go).
	loads   *groupcommit.Batcher[uuid.UUID, *outboxtype.Delivery]
	records *groupcommit.Keyed[uuid.UUID, *dbsqlc.OutboxAttemptRecordParams, *dbsqlc.OutboxAttemptRecordRow]
	// wake notifies River of the jobs InlineJobs has the publish
	// statement write.
	wake *wake
}

// New returns the Engine of cfg on pool. It inserts jobs with an
// insert-only River client of its own, so it needs no reference to the
// application's client.
func New(pool *pgxpool.Pool, cfg *Config) (*Engine, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	// Its inserts notify the workers at most once per
	// shared.InsertNotifyInterval: a committed publish wakes a worker.
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{FetchCooldown: shared.InsertNotifyInterval, Logger: c.Logger})
	if err != nil {
		return nil, fmt.Errorf("outbox: river insert client: %w", err)
	}
	m, err := newMetrics(c.MeterProvider, pool)
	if err != nil {
		return nil, fmt.Errorf("outbox: metrics: %w", err)
	}
	e := &Engine{
		config:     c,
		pool:       pool,
		queries:    dbsqlc.New(pool),
		inserter:   inserter,
		wake:       newWake(dbsqlc.New(pool), c.Queue),
		partitions: partition.NewCache(pool),
		keys:       c.Keys,
		egress:     c.Egress,
		admission:  c.Admission,
		retries:    newRetryPlan(&c),
		metrics:    m,
		tracer:     telemetry.Tracer(c.TracerProvider, "outbox"),
	}
	e.loads = groupcommit.New(groupcommit.Config[uuid.UUID]{MaxSize: combineMax, Slots: combineSlots, Timeout: recordTimeout}, e.loadMany)
	e.records = groupcommit.NewKeyed(groupcommit.Config[*dbsqlc.OutboxAttemptRecordParams]{MaxSize: combineMax, Slots: combineSlots, Timeout: recordTimeout},
		func(ctx context.Context, _ uuid.UUID, params []*dbsqlc.OutboxAttemptRecordParams) ([]*dbsqlc.OutboxAttemptRecordRow, []error) {
			return e.recordMany(ctx, params)
		})
	return e, nil
}

// The delivery worker's statements that load the delivery and record the
// attempt are combined across the deliveries a node works at once (as
// admission's first take of a slot is): each runs as one statement (or
// one pipelined transaction) for every delivery that asks while the
// previous ones are in the database. Under load this takes the
// database's work per delivery, and the connections the workers hold,
// down by the size of the batches; a lone delivery runs its statement at
// once.
const (
	// combineMax bounds the deliveries of one combined statement.
	combineMax = 64
	// combineSlots is how many combined statements of a kind run at once.
	combineSlots = 2
)

// AddWorkers registers the delivery workers (a delivery per job, and
// batches) and the periodic rescue's worker in workers.
func (e *Engine) AddWorkers(workers *river.Workers) error {
	if err := river.AddWorkerSafely(workers, &Worker{engine: e}); err != nil {
		return fmt.Errorf("outbox: add delivery worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &BatchWorker{engine: e}); err != nil {
		return fmt.Errorf("outbox: add batch delivery worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &rescueWorker{engine: e}); err != nil {
		return fmt.Errorf("outbox: add rescue worker: %w", err)
	}
	return nil
}

// now returns the configured clock's time in UTC at Postgres' precision.
func (e *Engine) now() time.Time { return shared.Micro(e.config.Now()) }
