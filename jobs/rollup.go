package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

const (
	// DefaultRollupInterval is how often the rollup job runs.
	DefaultRollupInterval = 5 * time.Minute
	// rollupLag is how long after an hour ends its messages are counted: a
	// receive transaction that stamped a message before the hour ended has
	// committed by then (ReceiveTimeout is 10 s by default).
	rollupLag = 5 * time.Minute
	// attemptRollupLag is how long after an hour ends its delivery
	// attempts are counted: an attempt is stamped when its request starts
	// and recorded when it ends, at most the outbox's longest endpoint
	// timeout (5 min) and the record's 10 s later.
	attemptRollupLag = 10 * time.Minute
	// RollupKept is how far back the hourly rollups keep hours: the
	// dashboard's longest chart window (7 days) and a day.
	RollupKept = 8 * 24 * time.Hour
	// rollupStep is the most hours one statement counts.
	rollupStep    = 24 * time.Hour
	rollupTimeout = 10 * time.Minute
)

// Watermarks of the rollups in wharf_rollups: how far each has counted.
const (
	inboxRollup   = "inbox_hourly"
	attemptRollup = "outbox_attempts_hourly"
)

// RollupResult says what a rollup run did, per rollup.
type RollupResult struct {
	// Inbox is the count of inbox messages per source and hour
	// (wharf_inbox_hourly).
	Inbox RollupHours `json:"inbox"`
	// Attempts is the count of outbox delivery attempts per endpoint,
	// outcome and hour (wharf_outbox_attempts_hourly).
	Attempts RollupHours `json:"attempts"`
}

// RollupHours says what one rollup of a run did.
type RollupHours struct {
	// From and Until bound the hours counted, Until excluded; equal when
	// there was nothing new to count.
	From  time.Time `json:"from"`
	Until time.Time `json:"until"`
	// Pruned counts the rows of hours dropped for being older than
	// RollupKept.
	Pruned int64 `json:"pruned"`
}

// rollup is one hourly rollup: its watermark's name, how long after an hour
// ends it is counted, and its statements.
type rollup struct {
	name  string
	lag   time.Duration
	count func(ctx context.Context, from, until time.Time) error
	prune func(ctx context.Context, before time.Time) (int64, error)
}

// Rollup counts, for every hour that ended since the last run, the inbox
// messages received per source and the outbox delivery attempts per
// endpoint and outcome (the dashboard reads these instead of a window of
// rows), and drops hours older than RollupKept. Running it twice, or on two
// nodes at once, counts the same. One rollup failing does not stop the
// other; the error joins both.
func (m *Maintainer) Rollup(ctx context.Context) (*RollupResult, error) {
	q := dbsqlc.New(m.pool)
	res := &RollupResult{}
	var inboxErr, attemptsErr error
	res.Inbox, inboxErr = m.rollupHours(ctx, q, rollup{
		name: inboxRollup, lag: rollupLag,
		count: func(ctx context.Context, from, until time.Time) error {
			return q.RollupInboxHours(ctx, dbsqlc.RollupInboxHoursParams{FromHour: from, UntilHour: until})
		},
		prune: q.RollupInboxPrune,
	})
	res.Attempts, attemptsErr = m.rollupHours(ctx, q, rollup{
		name: attemptRollup, lag: attemptRollupLag,
		count: func(ctx context.Context, from, until time.Time) error {
			return q.RollupOutboxAttemptHours(ctx, dbsqlc.RollupOutboxAttemptHoursParams{FromHour: from, UntilHour: until})
		},
		prune: q.RollupOutboxAttemptPrune,
	})
	return res, errors.Join(inboxErr, attemptsErr)
}

// rollupHours counts the hours of r that ended r.lag ago since its
// watermark (at most RollupKept back), a day per statement, and drops hours
// older than RollupKept.
func (m *Maintainer) rollupHours(ctx context.Context, q *dbsqlc.Queries, r rollup) (RollupHours, error) {
	until := m.cfg.Now().Add(-r.lag).UTC().Truncate(time.Hour)
	floor := until.Add(-RollupKept)
	from, err := q.RollupUntil(ctx, r.name)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || (err == nil && from.Before(floor)):
		from = floor
	case err != nil:
		return RollupHours{}, fmt.Errorf("jobs: rollup %s: %w", r.name, err)
	}
	res := RollupHours{From: from.UTC(), Until: from.UTC()}
	for res.Until.Before(until) {
		to := res.Until.Add(rollupStep)
		if to.After(until) {
			to = until
		}
		if err := r.count(ctx, res.Until, to); err != nil {
			return res, fmt.Errorf("jobs: rollup %s of %s to %s: %w", r.name, res.Until.Format(time.RFC3339), to.Format(time.RFC3339), err)
		}
		res.Until = to
	}
	if res.Pruned, err = r.prune(ctx, floor); err != nil {
		return res, fmt.Errorf("jobs: rollup %s prune: %w", r.name, err)
	}
	return res, nil
}

// rollupArgs are the args of the rollup job.
type rollupArgs struct{}

// Kind is the River job kind of the rollup.
func (rollupArgs) Kind() string { return "wharf_rollup" }

type rollupWorker struct {
	river.WorkerDefaults[rollupArgs]
	m *Maintainer
}

// Timeout lets a first rollup (up to RollupKept of messages) run longer
// than the client's JobTimeout.
func (w *rollupWorker) Timeout(*river.Job[rollupArgs]) time.Duration { return rollupTimeout }

// Work counts the hours that ended since the last run.
func (w *rollupWorker) Work(ctx context.Context, _ *river.Job[rollupArgs]) error {
	res, err := w.m.Rollup(ctx)
	if err != nil {
		return err
	}
	return river.RecordOutput(ctx, res)
}
