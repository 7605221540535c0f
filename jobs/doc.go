// Package jobs keeps Wharf's tables small without losing work: River
// periodic jobs create daily partitions ahead, drop whole expired partitions
// (cheap, no vacuum bloat) and prune dedupe keys, finished outbox deliveries
// and expired idempotency keys in bounded batches.
//
// Add [PeriodicJobs] to your River client's PeriodicJobs and register the
// workers with [AddWorkers], giving both the same [Config] (retentions,
// dedupe window, interval; [Config.Validate] reports every problem). River
// runs periodic jobs on the elected leader; every run also takes an advisory
// lock, so overlapping runs (two nodes, a manual run from the CLI) are safe
// and end in the same state.
//
// A partition is dropped only when every row in it is finished; a day that
// still holds work (a message to process, a delivery to retry, a dead letter
// younger than DeadLetterRetention) is kept and reported, and dropped by a
// later run once its rows finish.
//
// The jobs run a [Maintainer] (from [NewMaintainer]), which the wharf CLI
// and tests call directly: [Maintainer.Upkeep] creates partitions
// ([UpkeepResult]), [Maintainer.Prune] runs retention, or with
// [PruneOpts.DryRun] only says what it would do ([PruneResult]), and
// [Maintainer.Report] describes every partitioned table ([TableReport]).
//
// The README's "Retention: partitions and pruning" section lists the
// defaults and what each run keeps.
package jobs
