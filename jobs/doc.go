// Package jobs keeps Wharf's tables small without losing work: River
// periodic jobs create daily partitions ahead, drop whole expired partitions
// (cheap, no vacuum bloat) and prune dedupe keys, finished outbox deliveries
// and expired idempotency keys in bounded batches.
//
// Make a [Maintainer] with [NewMaintainer] (a nil [Config] is the defaults:
// retentions, dedupe window, interval; an invalid one is refused with every
// problem listed under [ErrInvalidConfig]), register its workers with
// [Maintainer.AddWorkers] and add [Maintainer.PeriodicJobs] to your River
// client's PeriodicJobs, with workers for [Maintainer.Queue]; or let
// wharfriver.Configure do all of it. River runs periodic jobs on the
// elected leader; every prune also holds a lease, so overlapping runs (two
// nodes, a manual run from the CLI) are safe and end in the same state.
//
// A partition is dropped only when every row in it is finished; a day that
// still holds work (a message to process, a delivery to retry, a dead letter
// younger than DeadLetterRetention) is kept and reported, and dropped by a
// later run once its rows finish.
//
// The wharf CLI and tests call the Maintainer directly: [Maintainer.Upkeep] creates partitions
// ([UpkeepResult]), [Maintainer.Prune] runs retention, or with
// [PruneOpts.DryRun] only says what it would do ([PruneResult]), and
// [Maintainer.Report] describes every partitioned table ([TableReport]).
//
// docs/retention.md lists the defaults and what each run keeps.
package jobs
