package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/operator"
	"github.com/wharfhq/wharf/internal/ordering"
	"github.com/wharfhq/wharf/internal/process"
	"github.com/wharfhq/wharf/internal/receive"
	"github.com/wharfhq/wharf/internal/shared"
	"github.com/wharfhq/wharf/internal/telemetry"
)

const (
	// DefaultQueue is the River queue of inbox jobs unless Config.Queue says
	// otherwise. The application's River client must work this queue.
	DefaultQueue = "wharf_inbox"
	// DefaultMaxAttempts is how many times a message's handler runs before
	// the message is dead, unless Config.MaxAttempts says otherwise. With
	// River's default backoff (attempt⁴ seconds, jittered) 20 attempts span
	// about a week.
	DefaultMaxAttempts = 20
	// DefaultMaxBodyBytes is the body limit of a Source unless it sets one.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultBatchSize is how many messages share a receive transaction and
	// a processing job unless Config.BatchSize says otherwise.
	DefaultBatchSize = 50
	// DefaultBatchWait is how long a delivery waits for others to share its
	// transaction unless Config.BatchWait says otherwise.
	DefaultBatchWait = time.Millisecond
)

// Config configures an Inbox. A nil *Config means every default.
type Config struct {
	// Sources are the senders the HTTP handler accepts, by name. ReceiveTx
	// accepts any source name. Defaults to none.
	Sources []Source
	// Queue is the River queue inbox jobs are inserted into. Defaults to
	// DefaultQueue.
	Queue string
	// MaxAttempts is how many times a message's handler may run before the
	// message is dead. Defaults to DefaultMaxAttempts.
	MaxAttempts int
	// Logger receives structured logs. Bodies and secrets are never logged.
	// A message that fails or dies is one line (warn, error); one received
	// or processed is logged at debug only: give a logger enabled for
	// slog.LevelDebug for a line per message. Rejected requests are one
	// info line per source and result per RejectionLogInterval. Defaults
	// to slog.Default().
	Logger *slog.Logger
	// ReceiveTimeout bounds the database work of one HTTP delivery; past
	// it the delivery is answered 503 and nothing is recorded. Defaults to
	// DefaultReceiveTimeout.
	ReceiveTimeout time.Duration
	// BatchSize caps how many messages share one transaction and one
	// processing job. The HTTP handler gathers concurrent deliveries into
	// one receive transaction (group commit: one WAL flush for the batch,
	// each delivery answered after the commit that covers it), ReceiveManyTx
	// gives up to BatchSize new messages one River job, and that job runs
	// each handler in its own savepoint of one transaction (a job takes 30
	// messages at most, whatever BatchSize). A message's own job (ReceiveTx
	// gives one to each message) takes on up to BatchSize-1 other messages
	// whose jobs wait in its queue, in its transaction, the same way. 1
	// turns batching off: each delivery commits alone and each message gets
	// its own job and transaction. Defaults to DefaultBatchSize.
	BatchSize int
	// BatchWait is the longest a delivery waits for others to join its
	// batch. It waits only while other batches of this Inbox are
	// committing (an idle inbox commits at once), and stops waiting when
	// those commits end or the batch is full; past BatchWait it commits
	// alongside them. Defaults to DefaultBatchWait; a negative value never
	// waits.
	BatchWait time.Duration
	// MaxProcessing caps the processing transactions this Inbox runs at
	// once, each holding a connection of the pool while it runs. Jobs of
	// the inbox queue that River starts beyond it wait for one, holding
	// a River worker but no connection, and batch jobs among them whose
	// messages have no ordering key share a transaction, up to BatchSize
	// messages, while the node's handlers are quick (a mean under a
	// millisecond a message). So the queue's MaxWorkers may exceed what
	// the pool can spare. A job that waits half its River timeout runs
	// again later, using no attempt. Defaults to half the pool's MaxConns,
	// at least 1.
	MaxProcessing int
	// Now returns the current time; tests inject a clock. Defaults to
	// time.Now.
	Now func() time.Time
	// MeterProvider receives the inbox's metrics (wharf_inbox_…, listed in
	// docs/operations.md, "Metrics and traces"). Defaults to the global
	// MeterProvider (otel.GetMeterProvider: a no-op until the application
	// installs an SDK). The database gauges query Postgres only when
	// collected.
	MeterProvider metric.MeterProvider
	// TracerProvider receives the inbox's spans: wharf.inbox.receive for each
	// HTTP delivery (continuing the trace of a traceparent header the
	// sender sent) and wharf.inbox.process for each handler run, linked to
	// the receive span through the message (its trace context is stored
	// with it when sampled). Defaults to the global TracerProvider.
	TracerProvider trace.TracerProvider
	// OnDead is called once for each message its processing made dead
	// (attempts exhausted, Permanent, river.JobCancel), after the commit
	// that recorded it: an alert hook. It runs on the worker's goroutine,
	// so keep it short (hand slow work to a goroutine or a queue); a panic
	// in it is recovered and logged. Operator actions (Skip, Forget,
	// Replay) do not call it, nor does a job that finds its message
	// skipped, erased or replayed while it ran. Defaults to none.
	OnDead func(ctx context.Context, msg *Message, cause error)
	// RejectionLogInterval is the least time between two log lines about
	// rejected requests of one source and result (the rest are counted and
	// reported with the next line). Defaults to 10 s; negative logs every
	// one.
	RejectionLogInterval time.Duration
}

// Inbox receives, stores and processes webhooks. Create one with New, add
// its workers to the River client that will process its queue with
// AddWorkers, and register handlers with Handle (or HandleBatch).
type Inbox struct {
	engines
	pool       *pgxpool.Pool
	queue      string
	logger     *slog.Logger
	now        func() time.Time
	sources    map[string]*Source
	handlers   *registry
	metrics    *metrics
	rejections *rejectionLog
	tracer     trace.Tracer
}

// engines are the Inbox's mechanisms, each a type of its own with its own
// config, built by New (docs/design.md, "Packages", has the picture).
type engines struct {
	jobs      *inboxjob.Jobs
	ordering  *ordering.Ordering
	receiver  *receive.Receiver
	processor *process.Processor
	rescuer   *process.Rescuer
	operator  *operator.Actions
}

// New returns an Inbox storing messages through pool.
func New(pool *pgxpool.Pool, cfg *Config) (*Inbox, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	// A client without workers only inserts; it is never started. Its
	// FetchCooldown is how often at most its inserts notify the workers
	// (shared.InsertNotifyInterval).
	insertClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{FetchCooldown: shared.InsertNotifyInterval, Logger: c.Logger})
	if err != nil {
		return nil, fmt.Errorf("inbox: river client: %w", err)
	}
	ib := &Inbox{
		pool:       pool,
		queue:      c.Queue,
		logger:     c.Logger,
		now:        c.Now,
		sources:    make(map[string]*Source, len(c.Sources)),
		handlers:   &registry{regs: make(map[handlerKey]*registration), reconciles: make(map[string]*registration)},
		rejections: newRejectionLog(c.Logger, c.RejectionLogInterval),
		tracer:     telemetry.Tracer(c.TracerProvider, "inbox"),
	}
	names := make([]string, len(c.Sources))
	for i := range c.Sources {
		names[i] = c.Sources[i].Name
		ib.sources[c.Sources[i].Name] = &c.Sources[i]
	}
	if ib.metrics, err = newMetrics(c.MeterProvider, pool, names); err != nil {
		return nil, fmt.Errorf("inbox: metrics: %w", err)
	}
	if ib.engines, err = newEngines(ib, &c, insertClient); err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	return ib, nil
}

// newEngines builds ib's engines from c, a Config with its defaults, and
// the inbox's insert-only River client (the application's client works
// the jobs).
func newEngines(ib *Inbox, c *Config, insertClient *river.Client[pgx.Tx]) (e engines, err error) {
	var onDead process.OnDead
	if c.OnDead != nil {
		onDead = func(ctx context.Context, msg *dbsqlc.WharfInboxMessage, cause error) {
			c.OnDead(ctx, messageFromRow(msg), cause)
		}
	}
	if e.jobs, err = inboxjob.New(&inboxjob.Config{
		River: insertClient, Queue: c.Queue, MaxAttempts: c.MaxAttempts, Now: ib.clock,
	}); err != nil {
		return e, err
	}
	if e.ordering, err = ordering.New(&ordering.Config{Jobs: e.jobs, BatchSize: c.BatchSize, Now: ib.clock}); err != nil {
		return e, err
	}
	if e.receiver, err = receive.New(&receive.Config{
		Pool: ib.pool, Jobs: e.jobs, BatchSize: c.BatchSize, BatchWait: c.BatchWait, Timeout: c.ReceiveTimeout, Now: ib.clock,
	}); err != nil {
		return e, err
	}
	if e.processor, err = process.New(&process.Config{
		Pool: ib.pool, Jobs: e.jobs, Ordering: e.ordering, Registry: ib.handlers, Metrics: ib.metrics,
		Logger: c.Logger, Tracer: ib.tracer, Now: ib.clock, OnDead: onDead,
		// A message's own job takes on waiting ones up to a batch, and
		// batch jobs that start together share a transaction up to one.
		Adopt:        min(c.BatchSize, inboxjob.MaxMessages) - 1,
		Merge:        min(c.BatchSize, inboxjob.MaxMessages),
		Transactions: cmp.Or(c.MaxProcessing, max(int(ib.pool.Config().MaxConns)/2, 1)),
	}); err != nil {
		return e, err
	}
	if e.rescuer, err = process.NewRescuer(&process.RescuerConfig{
		Pool: ib.pool, Jobs: e.jobs, Ordering: e.ordering, Logger: c.Logger, Now: ib.clock, OnDead: onDead,
		After: RescueAfter, Interval: RescueInterval,
	}); err != nil {
		return e, err
	}
	e.operator, err = operator.New(&operator.Config{
		River: insertClient, Jobs: e.jobs, Ordering: e.ordering, Logger: c.Logger, Now: ib.clock,
	})
	return e, err
}

// withDefaults returns a copy of c (nil: the zero Config) with each unset
// field at its default: the one place the inbox applies its defaults. Its
// Sources are copies, so later edits of c change nothing.
func (c *Config) withDefaults() Config {
	var d Config
	if c != nil {
		d = *c
	}
	d.Sources = slices.Clone(d.Sources)
	for i := range d.Sources {
		d.Sources[i].MaxBodyBytes = cmp.Or(d.Sources[i].MaxBodyBytes, DefaultMaxBodyBytes)
	}
	d.Queue = cmp.Or(d.Queue, DefaultQueue)
	d.MaxAttempts = cmp.Or(d.MaxAttempts, DefaultMaxAttempts)
	d.Logger = cmp.Or(d.Logger, slog.Default())
	if d.Now == nil { // a func: cmp.Or cannot compare it
		d.Now = time.Now
	}
	d.ReceiveTimeout = cmp.Or(d.ReceiveTimeout, DefaultReceiveTimeout)
	d.BatchSize = cmp.Or(d.BatchSize, DefaultBatchSize)
	d.BatchWait = max(cmp.Or(d.BatchWait, DefaultBatchWait), 0) // negative: never waits
	d.RejectionLogInterval = cmp.Or(d.RejectionLogInterval, defaultRejectionLogInterval)
	return d
}

// ErrInvalidConfig is returned by New for a Config it cannot use; the error
// lists every problem at once.
var ErrInvalidConfig = errors.New("inbox: invalid config")

// Validate reports every problem with c (a nil c is the defaults, which are
// valid), joined in one error where errors.Is(err, ErrInvalidConfig) is
// true. New calls it.
func (c *Config) Validate() error {
	if c == nil {
		return nil
	}
	p := shared.NewProblems(ErrInvalidConfig)
	if c.MaxAttempts < 0 {
		p.Addf("MaxAttempts %d is negative", c.MaxAttempts)
	}
	if c.BatchSize < 0 {
		p.Addf("BatchSize %d is negative", c.BatchSize)
	}
	if c.MaxProcessing < 0 {
		p.Addf("MaxProcessing %d is negative", c.MaxProcessing)
	}
	if c.ReceiveTimeout < 0 {
		p.Addf("ReceiveTimeout %s is negative", c.ReceiveTimeout)
	}
	seen := make(map[string]bool, len(c.Sources))
	for i := range c.Sources {
		src := &c.Sources[i]
		src.validate(p)
		if seen[src.Name] {
			p.Addf("source %q is configured twice", src.Name)
		}
		seen[src.Name] = true
	}
	return p.Err()
}

// Queue returns the River queue inbox jobs go to.
func (ib *Inbox) Queue() string { return ib.queue }

// AddWorkers registers the inbox's River workers in workers, the Workers
// of the River client that will process Queue(): processing, and the
// rescue of PeriodicJobs.
func (ib *Inbox) AddWorkers(workers *river.Workers) error {
	return errors.Join(
		river.AddWorkerSafely(workers, ib.processor.Worker()),
		river.AddWorkerSafely(workers, ib.processor.BatchWorker()),
		river.AddWorkerSafely(workers, ib.rescuer.Worker()),
	)
}

// clock returns the current time in UTC at Postgres's microsecond precision,
// so a timestamp survives the round trip through job args unchanged.
func (ib *Inbox) clock() time.Time {
	return shared.Micro(ib.now())
}

// txFunc runs fn in a transaction on the inbox's pool.
func (ib *Inbox) txFunc(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, ib.pool, fn)
}
