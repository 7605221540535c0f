package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/wharfhq/wharf/internal/ops"
	"github.com/wharfhq/wharf/jobs"
)

// retentionSetting is one retention setting of jobs.Config, as prune's
// flag sets it.
type retentionSetting struct {
	flag, usage string
	field       func(*jobs.Config) *time.Duration
	// zeroKeepsAll is true when 0 means "never" (ScrubAfter): any other
	// value keeps less.
	zeroKeepsAll bool
}

var retentionSettings = []retentionSetting{
	{"dedupe-window", "how long inbox dedupe keys are kept", func(c *jobs.Config) *time.Duration { return &c.DedupeWindow }, false},
	{"inbox-retention", "how long inbox messages are kept", func(c *jobs.Config) *time.Duration { return &c.InboxRetention }, false},
	{"outbox-retention", "how long outbox events are kept", func(c *jobs.Config) *time.Duration { return &c.OutboxRetention }, false},
	{"attempt-retention", "how long delivery attempt logs are kept", func(c *jobs.Config) *time.Duration { return &c.AttemptRetention }, false},
	{"dead-letter-retention", "how long dead messages and deliveries are kept after dying", func(c *jobs.Config) *time.Duration { return &c.DeadLetterRetention }, false},
	{"erased-key-retention", "how long the dedupe key of an erased event is kept", func(c *jobs.Config) *time.Duration { return &c.ErasedKeyRetention }, false},
	{"audit-retention", "how long audit log entries are kept", func(c *jobs.Config) *time.Duration { return &c.AuditRetention }, false},
	{"scrub-after", "erase the bodies of finished messages and events older than this (0: never)", func(c *jobs.Config) *time.Duration { return &c.ScrubAfter }, true},
}

// keepsLess reports whether a setting of v keeps less than one of app.
func (s retentionSetting) keepsLess(v, app time.Duration) bool {
	if s.zeroKeepsAll && (v == 0 || app == 0) {
		return v != 0 && app == 0
	}
	return v < app
}

// retentionFlags are prune's retention flags: each replaces the
// application's recorded setting.
type retentionFlags struct {
	fs     *flag.FlagSet
	values jobs.Config
}

func declareRetentionFlags(fs *flag.FlagSet) *retentionFlags {
	r := &retentionFlags{fs: fs}
	for _, s := range retentionSettings {
		durationVar(fs, s.field(&r.values), s.flag, 0, s.usage+" (default: the application's)")
	}
	return r
}

// given returns the settings whose flag the operator passed.
func (r *retentionFlags) given() map[string]bool {
	set := map[string]bool{}
	r.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// resolve returns the retention to prune by: the application's recorded
// settings (rec), each flag given replacing its own. Without a record
// every setting must be given. A flag keeping less than the application
// does is refused unless force (or a dry run, which drops nothing).
func (r *retentionFlags) resolve(rec *jobs.RetentionRecord, force, dryRun bool) (*jobs.Config, error) {
	given := r.given()
	cfg := &jobs.Config{}
	if rec != nil {
		*cfg = rec.Config
	}
	var missing, keepsLess []string
	for _, s := range retentionSettings {
		v := *s.field(&r.values)
		switch {
		case given[s.flag]:
			if rec != nil && s.keepsLess(v, *s.field(&rec.Config)) {
				keepsLess = append(keepsLess, fmt.Sprintf("-%s %s (the application's: %s)", s.flag, ops.Duration(v), describeSetting(s, *s.field(&rec.Config))))
			}
			*s.field(cfg) = v
		case rec == nil && !s.zeroKeepsAll:
			missing = append(missing, "-"+s.flag)
		}
	}
	if len(missing) > 0 {
		return nil, usageError{"no retention settings are recorded in this database: the application's jobs.Maintainer records them " +
			"when its periodic jobs run. Until they have, pass the application's own values for " + strings.Join(missing, ", ") +
			" (durations such as 72h or 30d)"}
	}
	if len(keepsLess) > 0 && !force && !dryRun {
		return nil, usageError{"this would drop what the application keeps: " + strings.Join(keepsLess, "; ") +
			"; pass -force to prune so anyway, or -dry-run to see what it would drop"}
	}
	return cfg, nil
}

// describeSetting writes a setting's value, "never" for a ScrubAfter of 0.
func describeSetting(s retentionSetting, v time.Duration) string {
	if s.zeroKeepsAll && v == 0 {
		return "never"
	}
	return ops.Duration(v)
}

// describeRetention writes the retention a prune runs by.
func describeRetention(cfg *jobs.Config) string {
	parts := make([]string, len(retentionSettings))
	for i, s := range retentionSettings {
		parts[i] = s.flag + " " + describeSetting(s, *s.field(cfg))
	}
	return strings.Join(parts, ", ")
}

// readRetention returns the application's recorded retention, nil when
// none is recorded.
func readRetention(ctx context.Context, e *env) (*jobs.RetentionRecord, error) {
	pool, err := e.connect(ctx)
	if err != nil {
		return nil, err
	}
	rec, err := jobs.ReadRetention(ctx, pool)
	if errors.Is(err, jobs.ErrNoRetentionRecord) {
		return nil, nil
	}
	return rec, err
}

func runPartitions(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "partitions", "[-exact] [-json]")
	exact := fs.Bool("exact", false, "count rows exactly (scans every partition) instead of the planner's estimate")
	asJSON := fs.Bool("json", false, "print JSON")
	if rest, err := parseInterleaved(fs, args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", rest[0])}
	}
	rec, err := readRetention(ctx, e)
	if err != nil {
		return err
	}
	cfg := jobs.Config{}
	if rec != nil {
		cfg = rec.Config
	}
	cfg.Logger = discardLogger
	m, err := jobs.NewMaintainer(e.pool, &cfg)
	if err != nil {
		return err
	}
	reports, err := m.Report(ctx, *exact)
	if err != nil {
		return err
	}
	if rec == nil {
		// Without the application's retention, which days are expired is
		// unknown: the defaults would be a guess.
		for i := range reports {
			reports[i].Retention = 0
			for j := range reports[i].Partitions {
				reports[i].Partitions[j].Expired = false
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		return enc.Encode(reports)
	}
	if rec == nil {
		fmt.Fprintln(e.out, "retention: not recorded yet (the application's periodic jobs record it when they run)")
	}
	for _, r := range reports {
		oldest := "none"
		if r.OldestUnfinished != nil {
			oldest = r.OldestUnfinished.Format(time.RFC3339)
		}
		retention := "not recorded"
		if r.Retention > 0 {
			retention = ops.Duration(r.Retention)
		}
		fmt.Fprintf(e.out, "%s (retention %s, oldest unfinished row: %s)\n", r.Table, retention, oldest)
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
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\n", p.Name, p.Day.Format(time.DateOnly), p.Rows, ops.Bytes(p.Bytes), state)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func runPrune(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "prune", "[-dry-run] [-force] [retention flags]")
	fs.Usage = func() {
		fmt.Fprintln(e.errOut, "usage: wharf prune [-dry-run] [-force] [retention flags]")
		fmt.Fprintln(e.errOut, "\nPrunes by the retention the application's jobs.Maintainer records in the database when its")
		fmt.Fprintln(e.errOut, "periodic jobs run. A retention flag replaces one setting; one that keeps less than the")
		fmt.Fprintln(e.errOut, "application does needs -force. Durations: 72h, 30d, 1d12h.")
		fmt.Fprintln(e.errOut, "\nflags:")
		fs.PrintDefaults()
	}
	dryRun := fs.Bool("dry-run", false, "report what would be dropped, kept and deleted; change nothing")
	force := fs.Bool("force", false, "prune by a retention flag that keeps less than the application does")
	batchSize := fs.Int("batch-size", jobs.DefaultBatchSize, "rows per DELETE or UPDATE batch")
	flags := declareRetentionFlags(fs)
	if rest, err := parseInterleaved(fs, args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", rest[0])}
	}
	rec, err := readRetention(ctx, e)
	if err != nil {
		return err
	}
	cfg, err := flags.resolve(rec, *force, *dryRun)
	if err != nil {
		return err
	}
	// The command reports what the run did: the maintainer's own lines
	// would say it twice.
	cfg.BatchSize, cfg.Logger = *batchSize, discardLogger
	m, err := jobs.NewMaintainer(e.pool, cfg)
	if errors.Is(err, jobs.ErrInvalidConfig) {
		return usageError{err.Error()}
	}
	if err != nil {
		return err
	}
	source := "as given"
	if rec != nil {
		source = "the application's, recorded " + rec.RecordedAt.Format(time.RFC3339)
	}
	fmt.Fprintf(e.out, "retention (%s): %s\n", source, describeRetention(cfg))
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
	fmt.Fprintf(e.out, "%s %d partitions; kept %d expired partitions; %s %d dedupe keys, %d past keys, %d idempotency keys, %d deliveries, %d audit entries; scrubbed %d messages, %d events, %d responses\n",
		drop, len(res.Dropped), len(res.Deferred), del, res.DedupeKeysDeleted, res.PastKeysDeleted,
		res.IdempotencyKeysDeleted, res.DeliveriesDeleted, res.AuditEntriesDeleted, res.MessagesScrubbed, res.EventsScrubbed, res.ResponsesScrubbed)
	return nil
}

// discardLogger is the logger of a component whose every outcome the
// command reports itself.
var discardLogger = slog.New(slog.NewTextHandler(io.Discard, nil))
