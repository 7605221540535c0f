package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/wharfhq/wharf/internal/admission"
	"github.com/wharfhq/wharf/internal/catalog"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/delivery"
	"github.com/wharfhq/wharf/internal/egress"
	"github.com/wharfhq/wharf/internal/partition"
	"github.com/wharfhq/wharf/internal/secretbox"
	"github.com/wharfhq/wharf/internal/shared"
	"github.com/wharfhq/wharf/internal/telemetry"
)

// UserAgent is sent with every delivery.
const UserAgent = egress.UserAgent

// eventsTable is the partitioned table the outbox publishes into.
const eventsTable = "wharf_outbox_events"

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
//
// It is a facade: what it does is done by the engines New builds from its
// Config (internal/secretbox seals secrets, internal/egress sends,
// internal/admission admits attempts, internal/delivery works the jobs),
// and it converts between their types and the public ones at its seams.
type Outbox struct {
	pool       *pgxpool.Pool
	queries    *dbsqlc.Queries
	config     *Config
	partitions *partition.Cache
	tracer     trace.Tracer
	keys       *secretbox.Ring
	endpoints  *endpoints
	engine     *delivery.Engine
	catalog    *catalog.Catalog
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
	keys, err := secretbox.New(&secretbox.Config{Keys: ringKeys(config.SecretKeys)})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	// self is the Outbox being built, for the engine's hooks.
	var self *Outbox
	events, err := compileCatalog(config.Catalog)
	if err != nil {
		return nil, err
	}
	sender := egress.New(&egress.Config{
		AllowPrivateNetworks: config.AllowPrivateNetworks,
		AllowedNetworks:      config.AllowedNetworks,
		Dialer:               config.Dialer,
		Transport:            config.Transport,
		WrapTransport:        config.WrapTransport,
		Proxy:                config.Proxy,
		ResponseBodyLimit:    config.ResponseBodyLimit,
		ResponseHeaderLimit:  config.ResponseHeaderLimit,
		Now:                  config.Now,
	})
	gate := admission.New(pool, &admission.Config{
		BusyRetryDelay:            config.BusyRetryDelay,
		CircuitBreakerThreshold:   config.CircuitBreakerThreshold,
		CircuitBreakerCooldown:    config.CircuitBreakerCooldown,
		CircuitBreakerMaxCooldown: config.CircuitBreakerMaxCooldown,
		Logger:                    config.Logger,
	})
	engine, err := delivery.New(pool, &delivery.Config{
		Queue:                     config.Queue,
		RetrySchedule:             config.RetrySchedule,
		RetryJitter:               config.RetryJitter,
		ThrottledRetryMin:         config.ThrottledRetryMin,
		RetryAfterMax:             config.RetryAfterMax,
		MaxEndpointTimeout:        config.MaxEndpointTimeout,
		DeliveryBatchSize:         config.DeliveryBatchSize,
		DeliveryBatchSpan:         config.DeliveryBatchSpan,
		DisableAfter:              config.DisableAfter,
		CircuitBreakerThreshold:   config.CircuitBreakerThreshold,
		CircuitBreakerCooldown:    config.CircuitBreakerCooldown,
		CircuitBreakerMaxCooldown: config.CircuitBreakerMaxCooldown,
		OnDead:                    deadHook(config.OnDead),
		OnEndpointDisabled:        disabledHook(config.OnEndpointDisabled),
		OnNotice:                  func(ctx context.Context) { self.kickNotices(ctx) },
		Logger:                    config.Logger,
		TracerProvider:            config.TracerProvider,
		MeterProvider:             config.MeterProvider,
		Now:                       config.Now,
		Keys:                      keys,
		Egress:                    sender,
		Admission:                 gate,
	})
	if err != nil {
		return nil, err
	}
	self = &Outbox{
		pool:       pool,
		queries:    dbsqlc.New(pool),
		config:     config,
		partitions: partition.NewCache(pool),
		tracer:     telemetry.Tracer(config.TracerProvider, "outbox"),
		keys:       keys,
		endpoints:  &endpoints{config: config, keys: keys, egress: sender, catalog: events},
		engine:     engine,
		catalog:    events,
	}
	self.endpoints.kick = self.kickNoticesTx
	return self, nil
}

// deadHook is Config.OnDead as the delivery engine calls it (nil: none).
func deadHook(hook func(context.Context, DeadDelivery)) func(context.Context, delivery.Dead) {
	if hook == nil {
		return nil
	}
	return func(ctx context.Context, d delivery.Dead) { hook(ctx, DeadDelivery(d)) }
}

// disabledHook is Config.OnEndpointDisabled as the delivery engine calls
// it (nil: none).
func disabledHook(hook func(context.Context, DisabledEndpoint)) func(context.Context, delivery.Disabled) {
	if hook == nil {
		return nil
	}
	return func(ctx context.Context, e delivery.Disabled) { hook(ctx, DisabledEndpoint(e)) }
}

// AddWorkers registers the outbox's delivery workers (a delivery per job,
// and batches: DeliveryBatchArgs) and the worker of its periodic rescue
// (PeriodicJobs) in workers, the application's River workers. It fails if
// a worker is already registered.
func (o *Outbox) AddWorkers(workers *river.Workers) error {
	if workers == nil {
		return errors.New("outbox: AddWorkers: nil workers")
	}
	if err := river.AddWorkerSafely(workers, &noticeWorker{outbox: o}); err != nil {
		return fmt.Errorf("outbox: add notice worker: %w", err)
	}
	return o.engine.AddWorkers(workers)
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

// inTx runs fn in a transaction of o's pool and returns its result.
func inTx[T any](ctx context.Context, o *Outbox, fn func(tx pgx.Tx) (T, error)) (T, error) {
	var out T
	err := o.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = fn(tx)
		return err
	})
	return out, err
}
