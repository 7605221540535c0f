package wharfriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/metric"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/telemetry"
	"github.com/wharfhq/wharf/jobs"
	"github.com/wharfhq/wharf/outbox"
)

// Workers per queue that Configure gives a Wharf queue missing from
// river.Config.Queues. A queue already there keeps its settings.
const (
	// DefaultInboxWorkers works the inbox queue. Workers beyond the
	// inbox's MaxProcessing transactions wait for one holding no
	// connection, their batch jobs merging (docs/operations.md, "River
	// configuration"); River fetches a queue's jobs at most MaxWorkers
	// per FetchCooldown.
	DefaultInboxWorkers = 32
	// DefaultOutboxWorkers works the outbox queue; a worker holds a
	// connection only for its short statements, not while a request is out.
	DefaultOutboxWorkers = 50
	// DefaultJobsWorkers works the queue of the periodic jobs.
	DefaultJobsWorkers = 2
)

// rescueMargin is how much longer than JobTimeout a running job must be
// before River's rescuer retries it, when Configure sets
// RescueStuckJobsAfter.
const rescueMargin = 30 * time.Second

// DefaultFetchPollInterval is the FetchPollInterval Configure sets when the
// config leaves it 0 (River's default is 1 s). A job inserted moments after
// another by the same process (an ordering wake, a retry, a delivery) may
// get no insert notification of its own (River sends one per queue per
// FetchCooldown), and then waits for the next poll.
const DefaultFetchPollInterval = 100 * time.Millisecond

// DefaultFetchCooldown is the FetchCooldown Configure gives the inbox's and
// the outbox's queues when neither the config nor the queue sets one
// (River's default is 100 ms). A queue's cooldown is the longest a job
// whose insert notified the workers waits for a fetch, and how often at
// most its workers fetch; with River's 100 ms a webhook received or an
// event published waited 0–100 ms for a worker, 50 ms at the median.
const DefaultFetchCooldown = 5 * time.Millisecond

// riverDefaultJobTimeout is River's JobTimeout when the config leaves it 0.
const riverDefaultJobTimeout = time.Minute

// queueCheckInterval is how often the leader checks that every queue
// holding Wharf's waiting jobs is worked.
const queueCheckInterval = 10 * time.Minute

// Components are the Wharf parts an application uses. Nil ones are left
// out.
type Components struct {
	// Pool is the application's pool. Required unless NoJobs.
	Pool *pgxpool.Pool
	// Inbox adds the inbox's workers and queue.
	Inbox *inbox.Inbox
	// Outbox adds the outbox's workers and queue.
	Outbox *outbox.Outbox
	// Jobs configures partition upkeep and retention, whose workers and
	// periodic jobs are added with it (given once, not twice as with
	// jobs.NewMaintainer). Defaults to jobs' defaults.
	Jobs *jobs.Config
	// NoJobs leaves the periodic jobs out, for an app that runs them in
	// another process. Defaults to false.
	NoJobs bool
	// Logger receives the warning about an unworked queue. Defaults to
	// river.Config.Logger, then slog.Default().
	Logger *slog.Logger
	// MeterProvider receives wharf_unworked_queue_jobs{queue}, set by each
	// run of the unworked-queue check: the number of Wharf's jobs waiting
	// in a queue no client works (0 once one does). Defaults to the global
	// MeterProvider.
	MeterProvider metric.MeterProvider
}

// ErrInvalidConfig is returned by Configure when a setting breaks one of
// Wharf's guarantees; the error lists every problem at once.
var ErrInvalidConfig = errors.New("wharfriver: invalid config")

// Configure adds to cfg what comps need:
//
//   - their workers to cfg.Workers (created when nil);
//   - their queues to cfg.Queues (created when nil): a queue already listed
//     keeps its settings, a missing one gets DefaultInboxWorkers,
//     DefaultOutboxWorkers or DefaultJobsWorkers;
//   - the periodic jobs (partition upkeep, retention, the inbox's rescue of
//     stranded messages, the outbox's of stranded deliveries) unless
//     NoJobs, and a check, run by the leader at
//     start and every 10 minutes, that logs at error once per queue when
//     Wharf's jobs wait in a queue that no River client works (a
//     receiver-only deployment whose workers forgot it, say);
//   - the inbox's and the outbox's queues' FetchCooldown, when neither
//     the client's nor the queue's is set, to DefaultFetchCooldown (5 ms):
//     a received message or a published event starts within milliseconds
//     of its commit, not after River's 100 ms cooldown or a poll;
//   - RescueStuckJobsAfter, when unset, to 30 s more than the job timeout:
//     an interrupted message or delivery is retried within about a minute
//     of its timeout, not River's default hour;
//   - FetchPollInterval, when unset, to DefaultFetchPollInterval (100 ms,
//     or the longest FetchCooldown of the client and of its queues without
//     a poll interval of their own, if longer; a queue added later with a
//     longer cooldown needs a FetchPollInterval of its own);
//   - cfg.Logger, when set, to one that leaves out River's info line for a
//     failed job of Wharf's ("Job errored; retrying"): Wharf logs each
//     failure once, with its message or delivery.
//
// It returns an error naming each problem, and changes nothing, when a set
// value breaks a guarantee: a RescueStuckJobsAfter shorter than JobTimeout,
// an invalid jobs.Config, or a worker kind already registered. (Outbox
// deliveries carry a River timeout of their own, longer than any endpoint's
// request timeout, whatever JobTimeout says.)
//
// The unworked-queue check reads the 1,000 longest-waiting of Wharf's jobs:
// a larger backlog in a worked queue can hide an unworked one until the
// backlog shrinks.
func Configure(cfg *river.Config, comps *Components) error {
	if cfg == nil || comps == nil {
		return fmt.Errorf("%w: Configure needs a river.Config and Components", ErrInvalidConfig)
	}
	var errs []error
	jobTimeout := cfg.JobTimeout
	if jobTimeout == 0 {
		jobTimeout = riverDefaultJobTimeout
	}
	if cfg.RescueStuckJobsAfter > 0 && jobTimeout > 0 && cfg.RescueStuckJobsAfter < jobTimeout {
		errs = append(errs, fmt.Errorf("river.Config.RescueStuckJobsAfter %s is shorter than JobTimeout %s: jobs still running would be retried", cfg.RescueStuckJobsAfter, jobTimeout))
	}
	if !comps.NoJobs && comps.Pool == nil {
		errs = append(errs, errors.New("Components.Pool is required for the periodic jobs (or set NoJobs)"))
	}
	var maintainer *jobs.Maintainer
	if !comps.NoJobs && comps.Pool != nil {
		m, err := jobs.NewMaintainer(comps.Pool, comps.Jobs)
		if err != nil {
			errs = append(errs, err)
		}
		maintainer = m
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}

	workers := cfg.Workers
	if workers == nil {
		workers = river.NewWorkers()
	}
	queues := map[string]int{}
	prompt := map[string]bool{} // the queues of webhooks and events
	if comps.Inbox != nil {
		errs = append(errs, comps.Inbox.AddWorkers(workers))
		queues[comps.Inbox.Queue()] = DefaultInboxWorkers
		prompt[comps.Inbox.Queue()] = true
	}
	if comps.Outbox != nil {
		errs = append(errs, comps.Outbox.AddWorkers(workers))
		queues[comps.Outbox.Queue()] = DefaultOutboxWorkers
		prompt[comps.Outbox.Queue()] = true
	}
	unworkedGauge, err := telemetry.Meter(comps.MeterProvider, "wharfriver").Int64Gauge("wharf_unworked_queue_jobs",
		metric.WithDescription("Wharf's jobs waiting in a queue that no River client works, by queue, as of the last check (every 10 minutes)."))
	if err != nil {
		return fmt.Errorf("wharfriver: metrics: %w", err)
	}
	checker := &queueChecker{logger: comps.Logger, warned: map[string]bool{}, seen: map[string]bool{},
		unworked: unworkedGauge, byQueue: telemetry.NewAttrs("queue")}
	if checker.logger == nil {
		checker.logger = cmpLogger(cfg.Logger)
	}
	var periodic []*river.PeriodicJob
	if !comps.NoJobs {
		errs = append(errs, maintainer.AddWorkers(workers), river.AddWorkerSafely(workers, checker))
		queues[maintainer.Queue()] = DefaultJobsWorkers
		periodic = append(maintainer.PeriodicJobs(), river.NewPeriodicJob(river.PeriodicInterval(queueCheckInterval),
			func() (river.JobArgs, *river.InsertOpts) {
				return queueCheckArgs{}, &river.InsertOpts{Queue: maintainer.Queue()}
			},
			&river.PeriodicJobOpts{ID: queueCheckArgs{}.Kind(), RunOnStart: true}))
		if comps.Inbox != nil {
			periodic = append(periodic, comps.Inbox.PeriodicJobs()...)
		}
		if comps.Outbox != nil {
			periodic = append(periodic, comps.Outbox.PeriodicJobs()...)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}

	cfg.Workers = workers
	if cfg.Queues == nil {
		cfg.Queues = map[string]river.QueueConfig{}
	}
	for name, n := range queues {
		q, ok := cfg.Queues[name]
		if !ok {
			q = river.QueueConfig{MaxWorkers: n}
		}
		if cfg.FetchCooldown == 0 && q.FetchCooldown == 0 && prompt[name] {
			q.FetchCooldown = DefaultFetchCooldown
		}
		cfg.Queues[name] = q
	}
	cfg.PeriodicJobs = append(cfg.PeriodicJobs, periodic...)
	if cfg.Logger != nil {
		// Without one, River logs at warn and above: nothing to quiet.
		cfg.Logger = quietWharfJobErrors(cfg.Logger)
	}
	if cfg.RescueStuckJobsAfter == 0 && jobTimeout > 0 {
		cfg.RescueStuckJobsAfter = jobTimeout + rescueMargin
	}
	if cfg.FetchPollInterval == 0 {
		// River requires every queue's poll to be no shorter than its
		// cooldown: a queue with a cooldown of its own and no poll of its
		// own takes the client's poll.
		poll := max(DefaultFetchPollInterval, cfg.FetchCooldown)
		for _, q := range cfg.Queues {
			if q.FetchPollInterval == 0 {
				poll = max(poll, q.FetchCooldown)
			}
		}
		cfg.FetchPollInterval = poll
	}
	return nil
}

func cmpLogger(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.Default()
}

// wharfKinds are the kinds of Wharf's jobs that wait for a worker.
var wharfKinds = []string{"wharf_inbox_process", "wharf_inbox_process_batch", outbox.DeliveryKind, outbox.DeliveryBatchKind}

// queueCheckArgs is the job that looks for Wharf's jobs waiting in a queue
// no client works.
type queueCheckArgs struct{}

// Kind is the River job kind of the queue check.
func (queueCheckArgs) Kind() string { return "wharf_queue_check" }

// queueChecker warns, once per queue and process, about Wharf's jobs
// waiting in a queue that no River client works.
type queueChecker struct {
	river.WorkerDefaults[queueCheckArgs]
	logger   *slog.Logger
	unworked metric.Int64Gauge
	byQueue  *telemetry.Attrs
	mu       sync.Mutex
	warned   map[string]bool
	seen     map[string]bool // queues reported unworked, set back to 0 once worked
}

// unworkedAfter is how long a queue must go without a client's report
// (River's clients report their queues every 10 minutes) and a job must
// wait before the check calls the queue unworked.
const unworkedAfter = 15 * time.Minute

func (c *queueChecker) Work(ctx context.Context, _ *river.Job[queueCheckArgs]) error {
	client := river.ClientFromContext[pgx.Tx](ctx)
	waiting, err := client.JobList(ctx, river.NewJobListParams().
		Kinds(wharfKinds...).
		States(rivertype.JobStateAvailable).
		OrderBy(river.JobListOrderByScheduledAt, river.SortOrderAsc).
		First(1000))
	if err != nil {
		return fmt.Errorf("wharfriver: list waiting jobs: %w", err)
	}
	queues, err := client.QueueList(ctx, river.NewQueueListParams().First(10000))
	if err != nil {
		return fmt.Errorf("wharfriver: list queues: %w", err)
	}
	return c.check(ctx, time.Now(), waiting.Jobs, queues.Queues)
}

// check logs the queues of jobs that have waited past unworkedAfter with
// no client reporting the queue since.
func (c *queueChecker) check(ctx context.Context, now time.Time, waiting []*rivertype.JobRow, queues []*rivertype.Queue) error {
	reported := make(map[string]time.Time, len(queues))
	for _, q := range queues {
		reported[q.Name] = q.UpdatedAt
	}
	type stuck struct {
		jobs   int
		oldest time.Time
	}
	unworked := map[string]*stuck{}
	for _, job := range waiting {
		if now.Sub(job.ScheduledAt) < unworkedAfter {
			continue
		}
		if at, ok := reported[job.Queue]; ok && now.Sub(at) < unworkedAfter {
			continue
		}
		s := unworked[job.Queue]
		if s == nil {
			s = &stuck{oldest: job.ScheduledAt}
			unworked[job.Queue] = s
		}
		s.jobs++
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for queue := range c.seen {
		if unworked[queue] == nil {
			c.unworked.Record(ctx, 0, c.byQueue.Of(queue))
		}
	}
	for queue, s := range unworked {
		c.seen[queue] = true
		c.unworked.Record(ctx, int64(s.jobs), c.byQueue.Of(queue))
		if c.warned[queue] {
			continue
		}
		c.warned[queue] = true
		c.logger.ErrorContext(ctx, "wharf: jobs wait in a queue that no River client works; add it to river.Config.Queues (wharfriver.Configure does)",
			"queue", queue, "waiting_jobs_at_least", s.jobs, "waiting_since", s.oldest)
	}
	return nil
}
