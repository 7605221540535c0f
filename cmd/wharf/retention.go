package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/wharfhq/wharf/jobs"
)

// retentionFlags declares the retention settings on fs. The CLI cannot see
// the application's jobs.Config: an operator running `wharf prune` by hand
// passes the settings the application uses, or it prunes by the defaults.
func retentionFlags(fs *flag.FlagSet) func() *jobs.Config {
	cfg := &jobs.Config{}
	fs.DurationVar(&cfg.DedupeWindow, "dedupe-window", jobs.DefaultDedupeWindow, "how long inbox dedupe keys are kept")
	fs.DurationVar(&cfg.InboxRetention, "inbox-retention", jobs.DefaultInboxRetention, "how long inbox messages are kept")
	fs.DurationVar(&cfg.OutboxRetention, "outbox-retention", jobs.DefaultOutboxRetention, "how long outbox events are kept")
	fs.DurationVar(&cfg.AttemptRetention, "attempt-retention", jobs.DefaultAttemptRetention, "how long delivery attempt logs are kept")
	fs.DurationVar(&cfg.DeadLetterRetention, "dead-letter-retention", jobs.DefaultDeadLetterRetention, "how long dead messages and deliveries are kept after dying")
	fs.DurationVar(&cfg.ScrubAfter, "scrub-after", 0, "erase bodies of finished messages and events older than this (0: never)")
	fs.IntVar(&cfg.BatchSize, "batch-size", jobs.DefaultBatchSize, "rows per DELETE or UPDATE batch")
	return func() *jobs.Config { return cfg }
}

func (e *env) maintainer(ctx context.Context, cfg *jobs.Config) (*jobs.Maintainer, error) {
	pool, err := e.connect(ctx)
	if err != nil {
		return nil, err
	}
	return jobs.NewMaintainer(pool, cfg)
}

func runPartitions(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("partitions", flag.ContinueOnError)
	fs.SetOutput(e.errOut)
	exact := fs.Bool("exact", false, "count rows exactly (scans every partition) instead of the planner's estimate")
	asJSON := fs.Bool("json", false, "print JSON")
	cfg := retentionFlags(fs)
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	m, err := e.maintainer(ctx, cfg())
	if err != nil {
		return err
	}
	reports, err := m.Report(ctx, *exact)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		return enc.Encode(reports)
	}
	for _, r := range reports {
		oldest := "none"
		if r.OldestUnfinished != nil {
			oldest = r.OldestUnfinished.Format(time.RFC3339)
		}
		fmt.Fprintf(e.out, "%s (retention %s, oldest unfinished row: %s)\n", r.Table, r.Retention, oldest)
		tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  PARTITION\tDAY\tROWS\tSIZE\tSTATE")
		for _, p := range r.Partitions {
			state := ""
			switch {
			case p.DetachPending:
				state = "detach pending"
			case p.Expired:
				state = "expired"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\n", p.Name, p.Day.Format(time.DateOnly), p.Rows, humanBytes(p.Bytes), state)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func runPrune(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("prune", flag.ContinueOnError)
	fs.SetOutput(e.errOut)
	dryRun := fs.Bool("dry-run", false, "report what would be dropped, kept and deleted; change nothing")
	cfg := retentionFlags(fs)
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	m, err := e.maintainer(ctx, cfg())
	if err != nil {
		return err
	}
	res, err := m.Prune(ctx, &jobs.PruneOpts{DryRun: *dryRun})
	if err != nil {
		return err
	}
	if res.Skipped {
		fmt.Fprintf(e.out, "another prune is running (a node's periodic job, or another wharf prune); nothing done\n")
		return nil
	}
	drop, del := "dropped", "deleted"
	if *dryRun {
		drop, del = "would drop", "would delete"
	}
	for _, name := range res.Dropped {
		fmt.Fprintf(e.out, "%s %s\n", drop, name)
	}
	for _, d := range res.Deferred {
		fmt.Fprintf(e.out, "kept %s: %d unfinished rows\n", d.Name, d.Unfinished)
	}
	fmt.Fprintf(e.out, "%s %d partitions; kept %d expired partitions; %s %d dedupe keys, %d idempotency keys, %d deliveries; scrubbed %d messages, %d events, %d responses\n",
		drop, len(res.Dropped), len(res.Deferred), del, res.DedupeKeysDeleted, res.IdempotencyKeysDeleted,
		res.DeliveriesDeleted, res.MessagesScrubbed, res.EventsScrubbed, res.ResponsesScrubbed)
	return nil
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
