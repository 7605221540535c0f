// Package process runs the inbox's handlers: the River workers of a
// message's own job (Worker) and of a batch's (BatchWorker), each handler
// in a transaction with its message's processed mark and its job's
// completion (in a batch, a savepoint each), the record of a failure, a
// batch's split and hand-over, and the periodic rescue of messages nothing
// would run (Rescuer).
//
// It works on message rows. The seam to package inbox, which it does not
// import, is Registry: the handlers registered for a (source, type), which
// inbox implements, building its public *Message from the row once per
// run. Errors with meaning to users are defined here and exported by
// inbox under the same identity (ErrNoHandler, ErrHandlerEndedTx,
// Permanent's).
package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"go.opentelemetry.io/otel/trace"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/groupcommit"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/ordering"
	"github.com/wharfhq/wharf/internal/pgxtx"
	"github.com/wharfhq/wharf/internal/shared"
)

// Registry resolves the handlers of messages: package inbox's
// registrations (Handle, HandleBatch).
type Registry interface {
	// Lookup returns the registration for msg, of its source and type
	// (the most specific one), or, for a late arrival its source
	// reconciles (late_policy inboxjob.LateReconcile), its source's
	// reconcile handler; false when there is none. Two lookups that
	// resolve to the same registration return equal values.
	Lookup(msg *dbsqlc.WharfInboxMessage) (Registration, bool)
}

// Registration is a registered handler, called with message rows.
type Registration interface {
	// Run calls the handler with msg's message, in tx.
	Run(ctx context.Context, tx pgx.Tx, msg *dbsqlc.WharfInboxMessage) error
	// Batch reports whether the handler takes several messages at once
	// (RunBatch).
	Batch() bool
	// RunBatch calls a batch handler with msgs' messages, in tx: each a
	// copy of its own.
	RunBatch(ctx context.Context, tx pgx.Tx, msgs []*dbsqlc.WharfInboxMessage) error
}

// Metrics records handler outcomes (package inbox's instruments).
type Metrics interface {
	// Handled records that msg's handler ran for took and left it in
	// status (processed, failed or dead).
	Handled(ctx context.Context, msg *dbsqlc.WharfInboxMessage, status string, took time.Duration)
}

// OnDead is told of each message its processing (or a rescue) made dead,
// after the commit that recorded it: package inbox's Config.OnDead.
type OnDead func(ctx context.Context, msg *dbsqlc.WharfInboxMessage, cause error)

// call calls f, if set, for msg, recovering (and logging) a panic.
func (f OnDead) call(ctx context.Context, log *slog.Logger, msg *dbsqlc.WharfInboxMessage, cause error) {
	if f == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			log.ErrorContext(ctx, "inbox: OnDead panicked", "message_id", msg.ID, "panic", fmt.Sprint(r))
		}
	}()
	f(ctx, msg, cause)
}

// Config configures a Processor. Every field but OnDead is required:
// package inbox applies its Config's defaults before it builds the
// engines.
type Config struct {
	// Pool runs the workers' transactions.
	Pool *pgxpool.Pool
	// Jobs inserts retry, split and hand-over jobs; its MaxAttempts is a
	// message's.
	Jobs *inboxjob.Jobs
	// Ordering parks and wakes the messages of ordering keys.
	Ordering *ordering.Ordering
	// Registry resolves the handlers.
	Registry Registry
	// Metrics records handler outcomes.
	Metrics Metrics
	// Logger receives the workers' logs.
	Logger *slog.Logger
	// Tracer starts the spans of handler runs.
	Tracer trace.Tracer
	// Now returns the current time at Postgres's precision.
	Now func() time.Time
	// OnDead, if set, is told of each message processing made dead.
	OnDead OnDead
	// Adopt is how many waiting messages of other jobs a message's own job
	// may take on in its transaction (see adopt); 0 takes on none.
	Adopt int
	// Merge is how many messages at most batch jobs share a transaction
	// for (see merge); below 2, none do.
	Merge int
	// Transactions is how many processing transactions run at once (see
	// merge's gate).
	Transactions int
}

// errInvalidConfig wraps each problem New (or NewRescuer) finds with its
// config.
var errInvalidConfig = errors.New("process: invalid config")

func (c *Config) validate() error {
	p := shared.NewProblems(errInvalidConfig)
	if c.Pool == nil {
		p.Addf("no Pool")
	}
	if c.Jobs == nil {
		p.Addf("no Jobs")
	}
	if c.Ordering == nil {
		p.Addf("no Ordering")
	}
	if c.Registry == nil {
		p.Addf("no Registry")
	}
	if c.Metrics == nil {
		p.Addf("no Metrics")
	}
	if c.Logger == nil {
		p.Addf("no Logger")
	}
	if c.Tracer == nil {
		p.Addf("no Tracer")
	}
	if c.Now == nil {
		p.Addf("no Now")
	}
	if c.Adopt < 0 || c.Adopt >= inboxjob.MaxMessages {
		p.Addf("Adopt %d is outside [0, %d)", c.Adopt, inboxjob.MaxMessages)
	}
	if c.Merge < 0 || c.Merge > inboxjob.MaxMessages {
		p.Addf("Merge %d is outside [0, %d]", c.Merge, inboxjob.MaxMessages)
	}
	if c.Transactions < 1 {
		p.Addf("Transactions %d is below 1", c.Transactions)
	}
	return p.Err()
}

// TestHooks are seams where a test puts something between two steps of
// processing, so that a race it means to show happens in that order. They
// are nil but in tests, and set before the workers start.
type TestHooks struct {
	// BeforeFailureRecord runs after a message's own job's transaction
	// has rolled back on its handler's failure, before the failure is
	// recorded.
	BeforeFailureRecord func(ctx context.Context, msg *dbsqlc.WharfInboxMessage)
	// QuickHandlers makes batch jobs merge whatever the handlers' times
	// (see merge), which on a loaded machine may pass the mean merges
	// need.
	QuickHandlers bool
}

// Processor runs handlers for the inbox's workers.
type Processor struct {
	config      Config
	suspects    suspects                                 // see adopt
	gate        *groupcommit.Batcher[gateCall, struct{}] // see merge
	handlerTime handlerTime                              // see merge
	// TestHooks are for tests only.
	TestHooks TestHooks
}

// New returns a Processor for cfg, or an error naming what cfg lacks.
func New(cfg *Config) (*Processor, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Processor{config: *cfg}
	p.gate = p.newGate(cfg.Transactions, cfg.Merge)
	return p, nil
}

// Worker returns the River worker of a message's own job.
func (p *Processor) Worker() *Worker { return &Worker{p: p} }

// BatchWorker returns the River worker of a batch job.
func (p *Processor) BatchWorker() *BatchWorker { return &BatchWorker{p: p} }

// lookup returns the registration for msg, or an error wrapping
// ErrNoHandler.
func (p *Processor) lookup(msg *dbsqlc.WharfInboxMessage) (Registration, error) {
	if reg, ok := p.config.Registry.Lookup(msg); ok {
		return reg, nil
	}
	if msg.LatePolicy != nil && *msg.LatePolicy == inboxjob.LateReconcile {
		return nil, fmt.Errorf("%w: no reconcile handler for the late arrivals of source %q", ErrNoHandler, msg.Source)
	}
	return nil, fmt.Errorf("%w for source %q, type %q", ErrNoHandler, msg.Source, msg.EventType)
}

// markProcessed is the processed mark of one message, in db.
func markProcessed(ctx context.Context, db dbsqlc.DBTX, now time.Time, msg *dbsqlc.WharfInboxMessage) error {
	return dbsqlc.New(db).InboxMessageMarkProcessed(ctx, dbsqlc.InboxMessageMarkProcessedParams{
		Now: now, ReceivedAt: msg.ReceivedAt, ID: msg.ID,
	})
}

// completeJob completes job in tx (River's JobCompleteTx), with a generic
// plan for River's statement (see pgxtx.GenericTx): it commits with the
// work's marks, or not at all.
func completeJob[T river.JobArgs](ctx context.Context, tx pgx.Tx, job *river.Job[T]) error {
	_, err := river.JobCompleteTx[*riverpgxv5.Driver, pgx.Tx](ctx, pgxtx.GenericTx{Tx: tx}, job)
	return err
}
