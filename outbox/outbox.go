package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"go.opentelemetry.io/otel/trace"

	"github.com/wharfhq/wharf/internal/admission"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/egress"
	"github.com/wharfhq/wharf/internal/partition"
	"github.com/wharfhq/wharf/internal/secretbox"
	"github.com/wharfhq/wharf/internal/shared"
	"github.com/wharfhq/wharf/internal/telemetry"
)

// UserAgent is sent with every delivery.
const UserAgent = egress.UserAgent

// Partitioned tables the outbox inserts into.
const (
	eventsTable   = "wharf_outbox_events"
	attemptsTable = "wharf_outbox_attempts"
)

var (
	// ErrNotFound is returned when an endpoint, delivery or event does not
	// exist.
	ErrNotFound = errors.New("outbox: not found")
	// ErrInvalidEvent is returned by PublishTx for an event it refuses (empty
	// or overlong type, data that is not JSON, text that is not UTF-8 or
	// holds a NUL byte…). Nothing was written.
	ErrInvalidEvent = errors.New("outbox: invalid event")
	// ErrPayloadTooLarge is returned by PublishTx when an event's encoded body
	// exceeds Config.MaxPayloadBytes. Nothing was written.
	ErrPayloadTooLarge = errors.New("outbox: payload too large")
	// ErrInvalidEndpoint is returned for endpoint parameters that cannot be
	// used (a URL that is not absolute http or https, a bad filter, text
	// that is not UTF-8 or holds a NUL byte…). Nothing was written.
	ErrInvalidEndpoint = errors.New("outbox: invalid endpoint")
	// ErrAmbiguousEndpoint is returned by EndpointEnsure when several
	// endpoints of the tenant have the URL: it cannot tell which one to keep.
	ErrAmbiguousEndpoint = errors.New("outbox: several endpoints have this URL")
	// ErrEndpointDisabled is returned when replaying to, or recovering the
	// missed events of, a disabled endpoint.
	ErrEndpointDisabled = errors.New("outbox: endpoint disabled")
	// ErrDeliveryInProgress is returned when replaying a delivery that is
	// still pending or retrying while a River job of it is waiting or
	// running.
	ErrDeliveryInProgress = errors.New("outbox: delivery in progress")
	// ErrEventGone is returned when replaying a delivery whose event
	// retention dropped or scrubbed: there is nothing left to send.
	ErrEventGone = errors.New("outbox: event no longer stored")
)

// Outbox publishes events and manages endpoints and deliveries. It is safe
// for concurrent use.
type Outbox struct {
	pool       *pgxpool.Pool
	queries    *dbsqlc.Queries
	config     *Config
	inserter   *river.Client[pgx.Tx]
	partitions *partition.Cache
	egress     *egress.Client
	gate       *admission.Gate
	keys       *secretbox.Ring
	retries    *retryPlan
	metrics    *metrics
	tracer     trace.Tracer
	combined   *combiners
}

// New returns an Outbox storing its state through pool. cfg may be nil for
// every default; an invalid cfg returns an error where
// errors.Is(err, ErrInvalidConfig) is true.
//
// The Outbox inserts jobs with an insert-only River client of its own, so it
// needs no reference to the application's client; the application's client
// works them once AddWorkers has registered the delivery worker.
func New(pool *pgxpool.Pool, cfg *Config) (*Outbox, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", ErrInvalidConfig)
	}
	config, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: config.Logger})
	if err != nil {
		return nil, fmt.Errorf("outbox: river insert client: %w", err)
	}
	m, err := newMetrics(config.MeterProvider, pool)
	if err != nil {
		return nil, fmt.Errorf("outbox: metrics: %w", err)
	}
	keys, err := secretbox.New(&secretbox.Config{Keys: ringKeys(config.SecretKeys)})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	o := &Outbox{
		pool:       pool,
		queries:    dbsqlc.New(pool),
		config:     config,
		inserter:   inserter,
		partitions: partition.NewCache(pool),
		egress: egress.New(&egress.Config{
			AllowPrivateNetworks: config.AllowPrivateNetworks,
			AllowedNetworks:      config.AllowedNetworks,
			Dialer:               config.Dialer,
			Transport:            config.Transport,
			WrapTransport:        config.WrapTransport,
			Proxy:                config.Proxy,
			ResponseBodyLimit:    config.ResponseBodyLimit,
			ResponseHeaderLimit:  config.ResponseHeaderLimit,
			Now:                  config.Now,
		}),
		gate: admission.New(pool, &admission.Config{
			BusyRetryDelay:            config.BusyRetryDelay,
			CircuitBreakerThreshold:   config.CircuitBreakerThreshold,
			CircuitBreakerCooldown:    config.CircuitBreakerCooldown,
			CircuitBreakerMaxCooldown: config.CircuitBreakerMaxCooldown,
			Logger:                    config.Logger,
		}),
		keys:    keys,
		retries: newRetryPlan(config),
		metrics: m,
		tracer:  telemetry.Tracer(config.TracerProvider, "outbox"),
	}
	o.combined = o.newCombiners()
	return o, nil
}

// AddWorkers registers the outbox's delivery workers (a delivery per job,
// and batches: DeliveryBatchArgs) and the worker of its periodic rescue
// (PeriodicJobs) in workers, the application's River workers. It fails if
// a worker is already registered.
func (o *Outbox) AddWorkers(workers *river.Workers) error {
	if workers == nil {
		return errors.New("outbox: AddWorkers: nil workers")
	}
	if err := river.AddWorkerSafely(workers, &deliveryWorker{outbox: o}); err != nil {
		return fmt.Errorf("outbox: add delivery worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &batchWorker{outbox: o}); err != nil {
		return fmt.Errorf("outbox: add batch delivery worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &rescueWorker{outbox: o}); err != nil {
		return fmt.Errorf("outbox: add rescue worker: %w", err)
	}
	return nil
}

// Queue returns the River queue the outbox's jobs go to.
func (o *Outbox) Queue() string { return o.config.Queue }

// EndpointTimeout returns the request timeout of endpoints created without
// one (Config.EndpointTimeout).
func (o *Outbox) EndpointTimeout() time.Duration { return o.config.EndpointTimeout }

// translateError maps a database error to the package's errors.
func translateError(err error) error { return shared.NotFound(err, ErrNotFound) }

// inTx runs fn in a transaction of the pool, committing when it returns nil.
func (o *Outbox) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, o.pool, fn)
}
