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
	// rollupLag is how long after an hour ends it is counted: a receive
	// transaction that stamped a message before the hour ended has
	// committed by then (ReceiveTimeout is 10 s by default).
	rollupLag = 5 * time.Minute
	// RollupKept is how far back the hourly rollup keeps hours: the
	// dashboard's longest chart window (7 days) and a day.
	RollupKept = 8 * 24 * time.Hour
	// rollupStep is the most hours one statement counts.
	rollupStep    = 24 * time.Hour
	rollupTimeout = 10 * time.Minute
)

// RollupResult says what a rollup run did.
type RollupResult struct {
	// From and Until bound the hours counted, Until excluded; equal when
	// there was nothing new to count.
	From  time.Time `json:"from"`
	Until time.Time `json:"until"`
	// Pruned counts the hours dropped for being older than RollupKept.
	Pruned int64 `json:"pruned"`
}

// Rollup counts the inbox messages received per source and hour, for every
// hour that ended since the last run (the dashboard's overview reads these
// instead of a day of messages), and drops hours older than RollupKept.
// Running it twice, or on two nodes at once, counts the same.
func (m *Maintainer) Rollup(ctx context.Context) (*RollupResult, error) {
	q := dbsqlc.New(m.pool)
	until := m.cfg.Now().Add(-rollupLag).UTC().Truncate(time.Hour)
	floor := until.Add(-RollupKept)
	from, err := q.RollupUntil(ctx, "inbox_hourly")
	switch {
	case errors.Is(err, pgx.ErrNoRows) || (err == nil && from.Before(floor)):
		from = floor
	case err != nil:
		return nil, fmt.Errorf("jobs: rollup: %w", err)
	}
	res := &RollupResult{From: from.UTC(), Until: from.UTC()}
	for res.Until.Before(until) {
		to := res.Until.Add(rollupStep)
		if to.After(until) {
			to = until
		}
		if err := q.RollupInboxHours(ctx, dbsqlc.RollupInboxHoursParams{FromHour: res.Until, UntilHour: to}); err != nil {
			return res, fmt.Errorf("jobs: rollup of %s to %s: %w", res.Until.Format(time.RFC3339), to.Format(time.RFC3339), err)
		}
		res.Until = to
	}
	if res.Pruned, err = q.RollupInboxPrune(ctx, floor); err != nil {
		return res, fmt.Errorf("jobs: rollup prune: %w", err)
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
