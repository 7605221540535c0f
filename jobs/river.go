package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/riverqueue/river"
)

// upkeepArgs are the args of the partition upkeep job.
type upkeepArgs struct{}

// Kind is the River job kind of partition upkeep.
func (upkeepArgs) Kind() string { return "wharf_partition_upkeep" }

// pruneArgs are the args of the retention job.
type pruneArgs struct{}

// Kind is the River job kind of retention.
func (pruneArgs) Kind() string { return "wharf_prune" }

// PeriodicJobs returns the periodic jobs to add to your River client's
// Config.PeriodicJobs: partition upkeep and retention, each run when the
// leader starts and every Config.Interval after, and the dashboard's
// hourly rollup every Config.RollupInterval, on Queue(). Upkeep and
// retention record the retention settings in the database each time they
// run (RecordRetention), for the operator's tools.
func (m *Maintainer) PeriodicJobs() []*river.PeriodicJob {
	opts := &river.InsertOpts{Queue: m.cfg.Queue}
	return []*river.PeriodicJob{
		river.NewPeriodicJob(river.PeriodicInterval(m.cfg.Interval),
			func() (river.JobArgs, *river.InsertOpts) { return upkeepArgs{}, opts },
			&river.PeriodicJobOpts{ID: upkeepArgs{}.Kind(), RunOnStart: true}),
		river.NewPeriodicJob(river.PeriodicInterval(m.cfg.Interval),
			func() (river.JobArgs, *river.InsertOpts) { return pruneArgs{}, opts },
			&river.PeriodicJobOpts{ID: pruneArgs{}.Kind(), RunOnStart: true}),
		river.NewPeriodicJob(river.PeriodicInterval(m.cfg.RollupInterval),
			func() (river.JobArgs, *river.InsertOpts) { return rollupArgs{}, opts },
			&river.PeriodicJobOpts{ID: rollupArgs{}.Kind(), RunOnStart: true}),
	}
}

// Queue returns the River queue the periodic jobs go to (Config.Queue,
// River's default queue unless set): give it workers in the River config.
func (m *Maintainer) Queue() string { return m.cfg.Queue }

// AddWorkers registers the workers of the periodic jobs in workers, the
// Workers of the River client that works Queue(). Together with
// PeriodicJobs it wires the jobs from one Config, given once to
// NewMaintainer.
func (m *Maintainer) AddWorkers(workers *river.Workers) error {
	return errors.Join(
		river.AddWorkerSafely(workers, &upkeepWorker{m: m}),
		river.AddWorkerSafely(workers, &pruneWorker{m: m}),
		river.AddWorkerSafely(workers, &rollupWorker{m: m}),
	)
}

// Job timeouts of the periodic jobs, whatever the client's JobTimeout (an
// inbox-friendly 20 s would cut a large prune short every hour). River's
// rescuer honours them too.
const (
	upkeepTimeout = 10 * time.Minute
	pruneTimeout  = time.Hour
)

type upkeepWorker struct {
	river.WorkerDefaults[upkeepArgs]
	m *Maintainer
}

// Timeout lets partition upkeep run longer than the client's JobTimeout.
func (w *upkeepWorker) Timeout(*river.Job[upkeepArgs]) time.Duration { return upkeepTimeout }

// Work records the retention settings, creates the partitions ahead and
// records what it created.
func (w *upkeepWorker) Work(ctx context.Context, _ *river.Job[upkeepArgs]) error {
	w.m.recordRetention(ctx)
	res, err := w.m.Upkeep(ctx)
	if err != nil {
		return err
	}
	return river.RecordOutput(ctx, res)
}

type pruneWorker struct {
	river.WorkerDefaults[pruneArgs]
	m *Maintainer
}

// Timeout lets retention run longer than the client's JobTimeout.
func (w *pruneWorker) Timeout(*river.Job[pruneArgs]) time.Duration { return pruneTimeout }

// Work records the retention settings, runs retention and records what it
// dropped, deferred and deleted.
func (w *pruneWorker) Work(ctx context.Context, _ *river.Job[pruneArgs]) error {
	w.m.recordRetention(ctx)
	res, err := w.m.Prune(ctx, nil)
	if err != nil {
		return err
	}
	return river.RecordOutput(ctx, res)
}
