package jobs

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/metric"

	"github.com/wharfhq/wharf/internal/partition"
)

// Retention bounds and defaults. Every retention setting must lie within
// [MinRetention, MaxRetention], but ErasedKeyRetention: a tombstone is a
// small row, kept up to MaxErasedKeyRetention.
const (
	MinRetention          = 72 * time.Hour
	MaxRetention          = 90 * 24 * time.Hour
	MaxErasedKeyRetention = 10 * 365 * 24 * time.Hour

	DefaultDedupeWindow        = 72 * time.Hour
	DefaultInboxRetention      = 30 * 24 * time.Hour
	DefaultOutboxRetention     = 30 * 24 * time.Hour
	DefaultAttemptRetention    = 90 * 24 * time.Hour
	DefaultDeadLetterRetention = 30 * 24 * time.Hour
	DefaultErasedKeyRetention  = 90 * 24 * time.Hour
	DefaultAuditRetention      = 365 * 24 * time.Hour
	DefaultPartitionDaysAhead  = partition.DefaultDaysAhead
	DefaultInterval            = time.Hour
	DefaultBatchSize           = 200
)

// Config configures partition upkeep and retention. A nil *Config means
// every default.
type Config struct {
	// DedupeWindow is how long an inbox dedupe key is kept: a redelivery
	// within it is a duplicate, one after it is accepted as a new event.
	// It must cover the longest retry window of your senders (see
	// SourceRetryWindows). Keys of messages that can still run (received,
	// failing, or dead and so replayable) are kept regardless, until the
	// message is processed or its day dropped.
	// Defaults to DefaultDedupeWindow (72h).
	DedupeWindow time.Duration
	// InboxRetention is how long inbox messages are kept, by the day they
	// were received. Defaults to DefaultInboxRetention (30 days).
	InboxRetention time.Duration
	// OutboxRetention is how long outbox events are kept, by the day they
	// were published. Defaults to DefaultOutboxRetention (30 days).
	OutboxRetention time.Duration
	// AttemptRetention is how long outbox delivery attempt logs are kept.
	// Defaults to DefaultAttemptRetention (90 days).
	AttemptRetention time.Duration
	// DeadLetterRetention is how long a dead message or delivery is kept
	// after it died, so that it can be inspected and replayed; its day is
	// not dropped before. Defaults to DefaultDeadLetterRetention (30 days).
	DeadLetterRetention time.Duration
	// ErasedKeyRetention is how long the dedupe key of an event erased on
	// request (inbox Forget) is kept from the erasure, as a tombstone: a
	// redelivery within it is a duplicate and stores nothing; one after it
	// is stored as a new event. Set it to the longest a sender may resend an
	// event (a provider's manual "resend" included): at least DedupeWindow,
	// at most MaxErasedKeyRetention (10 years). Defaults to
	// DefaultErasedKeyRetention (90 days).
	ErasedKeyRetention time.Duration
	// AuditRetention is how long audit log entries are kept: at least
	// MinRetention (72 hours), at most MaxErasedKeyRetention (10 years).
	// Defaults to DefaultAuditRetention (365 days).
	AuditRetention time.Duration
	// ScrubAfter, when set, empties the bodies and headers of processed
	// inbox messages and the payloads of fully delivered outbox events older
	// than this (metadata stays), ahead of row retention. It must be shorter
	// than InboxRetention and OutboxRetention. Defaults to 0: bodies are kept
	// for the row's life.
	ScrubAfter time.Duration
	// SourceRetryWindows declares, per inbox source, how long the sender
	// keeps retrying (Stripe: 3 days). Validation rejects a DedupeWindow
	// shorter than any of them. Defaults to none.
	SourceRetryWindows map[string]time.Duration
	// PartitionDaysAhead is how many days of partitions beyond today are
	// kept ready. Defaults to DefaultPartitionDaysAhead (7).
	PartitionDaysAhead int
	// Interval is how often the periodic jobs run (they also run when the
	// leader starts). Defaults to DefaultInterval (1h).
	Interval time.Duration
	// RollupInterval is how often the rollup job counts the inbox messages
	// and outbox delivery attempts of the hours that ended (the dashboard
	// reads the counts).
	// Defaults to DefaultRollupInterval (5m).
	RollupInterval time.Duration
	// BatchSize bounds each DELETE or UPDATE of a pruning pass, keeping
	// locks and bursts of work short. Defaults to DefaultBatchSize (200).
	BatchSize int
	// BatchPause is the pause after each batch, so that pruning yields to
	// the application's own traffic. Defaults to 0: pause three times as
	// long as the batch took (at most a second), so the pruner works at most
	// a quarter of the time. -1 disables pausing.
	BatchPause time.Duration
	// Queue is the River queue of the periodic jobs. Defaults to
	// river.QueueDefault.
	Queue string
	// Logger receives one line per run and per deferred partition.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// MeterProvider receives the retention metrics (wharf_retention_…,
	// docs/operations.md, "Metrics and traces"). Defaults to the global MeterProvider.
	MeterProvider metric.MeterProvider
	// Now returns the current time; tests inject a clock. Defaults to
	// time.Now.
	Now func() time.Time
}

// withDefaults returns a copy of c with every zero field defaulted.
func (c *Config) withDefaults() *Config {
	out := Config{}
	if c != nil {
		out = *c
	}
	setDefault(&out.DedupeWindow, DefaultDedupeWindow)
	setDefault(&out.InboxRetention, DefaultInboxRetention)
	setDefault(&out.OutboxRetention, DefaultOutboxRetention)
	setDefault(&out.AttemptRetention, DefaultAttemptRetention)
	setDefault(&out.DeadLetterRetention, DefaultDeadLetterRetention)
	setDefault(&out.ErasedKeyRetention, DefaultErasedKeyRetention)
	setDefault(&out.AuditRetention, DefaultAuditRetention)
	setDefault(&out.PartitionDaysAhead, DefaultPartitionDaysAhead)
	setDefault(&out.Interval, DefaultInterval)
	setDefault(&out.RollupInterval, DefaultRollupInterval)
	setDefault(&out.BatchSize, DefaultBatchSize)
	setDefault(&out.Queue, river.QueueDefault)
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return &out
}

func setDefault[T comparable](field *T, value T) {
	var zero T
	if *field == zero {
		*field = value
	}
}

// ErrInvalidConfig is returned by NewMaintainer and Validate for a Config
// they cannot use; the error lists every problem at once.
var ErrInvalidConfig = errors.New("jobs: invalid config")

// Validate reports every problem with c, defaults applied, joined in one
// error where errors.Is(err, ErrInvalidConfig) is true.
func (c *Config) Validate() error {
	return c.withDefaults().validate()
}

func (c *Config) validate() error {
	var errs []error
	for _, r := range []struct {
		name  string
		value time.Duration
	}{
		{"DedupeWindow", c.DedupeWindow},
		{"InboxRetention", c.InboxRetention},
		{"OutboxRetention", c.OutboxRetention},
		{"AttemptRetention", c.AttemptRetention},
		{"DeadLetterRetention", c.DeadLetterRetention},
	} {
		if r.value < MinRetention || r.value > MaxRetention {
			errs = append(errs, fmt.Errorf("%s %s is outside [%s, %s]", r.name, r.value, MinRetention, MaxRetention))
		}
	}
	switch {
	case c.ErasedKeyRetention < c.DedupeWindow:
		errs = append(errs, fmt.Errorf("ErasedKeyRetention %s is shorter than DedupeWindow %s", c.ErasedKeyRetention, c.DedupeWindow))
	case c.ErasedKeyRetention > MaxErasedKeyRetention:
		errs = append(errs, fmt.Errorf("ErasedKeyRetention %s is over %s", c.ErasedKeyRetention, MaxErasedKeyRetention))
	}
	switch {
	case c.AuditRetention < MinRetention:
		errs = append(errs, fmt.Errorf("AuditRetention %s is under %s", c.AuditRetention, MinRetention))
	case c.AuditRetention > MaxErasedKeyRetention:
		errs = append(errs, fmt.Errorf("AuditRetention %s is over %s", c.AuditRetention, MaxErasedKeyRetention))
	}
	for source, window := range c.SourceRetryWindows {
		if window > c.DedupeWindow {
			errs = append(errs, fmt.Errorf("DedupeWindow %s is shorter than source %q's retry window %s: a late retry would be processed twice",
				c.DedupeWindow, source, window))
		}
	}
	if c.ScrubAfter < 0 || (c.ScrubAfter > 0 && (c.ScrubAfter < time.Hour || c.ScrubAfter >= min(c.InboxRetention, c.OutboxRetention))) {
		errs = append(errs, fmt.Errorf("ScrubAfter %s must be 0 or within [1h, the shorter of InboxRetention and OutboxRetention)", c.ScrubAfter))
	}
	if c.PartitionDaysAhead < 1 || c.PartitionDaysAhead > 90 {
		errs = append(errs, fmt.Errorf("PartitionDaysAhead %d is outside [1, 90]", c.PartitionDaysAhead))
	}
	if c.Interval < time.Minute {
		errs = append(errs, fmt.Errorf("Interval %s is under a minute", c.Interval))
	}
	if c.RollupInterval < time.Minute || c.RollupInterval > time.Hour {
		errs = append(errs, fmt.Errorf("RollupInterval %s is outside [1m, 1h]", c.RollupInterval))
	}
	if c.BatchPause < -1 || c.BatchPause > time.Minute {
		errs = append(errs, fmt.Errorf("BatchPause %s is outside [-1ns, 1m]", c.BatchPause))
	}
	if c.BatchSize < 1 || c.BatchSize > 100_000 {
		errs = append(errs, fmt.Errorf("BatchSize %d is outside [1, 100000]", c.BatchSize))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}
