package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/ops"
	"github.com/wharfhq/wharf/internal/shared"
	"github.com/wharfhq/wharf/jobs"
)

// sourceDay is one row of `wharf stats`' inbox table.
type sourceDay struct {
	Source         string  `json:"source"`
	Day            string  `json:"day"`
	Received       int64   `json:"received"`
	Duplicates     int64   `json:"duplicates_blocked"`
	DuplicateRatio float64 `json:"duplicate_ratio"`
	Processed      int64   `json:"processed"`
	Dead           int64   `json:"dead"`
	SuccessRate    float64 `json:"processing_success_rate"`
}

type statsReport struct {
	Since      time.Time       `json:"since"`
	Inbox      []*sourceDay    `json:"inbox"`
	Duplicated []duplicated    `json:"most_duplicated"`
	Endpoints  []endpointStats `json:"endpoints"`
}

type duplicated struct {
	Source     string `json:"source"`
	EventID    string `json:"event_id"`
	Duplicates int64  `json:"duplicates_blocked"`
}

type endpointStats struct {
	EndpointID string `json:"endpoint_id"`
	// Endpoint names it: its URL, redacted, or "(deleted)".
	Endpoint    string  `json:"endpoint"`
	Attempts    int64   `json:"attempts"`
	Succeeded   int64   `json:"succeeded"`
	SuccessRate float64 `json:"success_rate"`
}

// runStats prints, for the last -days days: per source and day, webhooks
// received, duplicates blocked and their ratio (ops.DuplicateRatio),
// processing success and dead messages; the most duplicated event ids;
// per endpoint, attempts and their success rate.
func runStats(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "stats", "[-days N] [-top N] [-json]")
	days := fs.Int("days", 7, "how many days back, today included")
	top := fs.Int("top", 5, "how many of the most duplicated event ids")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parseInterleaved(fs, args); err != nil {
		return err
	}
	if *days < 1 || *days > 366 || *top < 0 || *top > 1000 {
		return usageError{"-days must be 1 to 366 and -top 0 to 1000"}
	}
	pool, err := e.connect(ctx)
	if err != nil {
		return err
	}
	q := dbsqlc.New(pool)
	since := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 1-*days)
	report := statsReport{Since: since, Inbox: []*sourceDay{}, Duplicated: []duplicated{}, Endpoints: []endpointStats{}}

	byKey := map[[2]string]*sourceDay{}
	day := func(source, d string) *sourceDay {
		sd := byKey[[2]string{source, d}]
		if sd == nil {
			sd = &sourceDay{Source: source, Day: d}
			byKey[[2]string{source, d}] = sd
			report.Inbox = append(report.Inbox, sd)
		}
		return sd
	}
	// Received: the hours the rollup job counted, and the rest live.
	rolled, live, err := rollupRanges(ctx, q, "inbox_hourly", since)
	if err != nil {
		return err
	}
	for _, r := range rolled {
		rows, err := q.StatsRolledByDay(ctx, dbsqlc.StatsRolledByDayParams{FromAt: r[0], UntilAt: r[1]})
		if err != nil {
			return err
		}
		for _, row := range rows {
			day(row.Source, row.Day).Received += row.Received
		}
	}
	for _, r := range live {
		rows, err := q.StatsReceivedByDay(ctx, dbsqlc.StatsReceivedByDayParams{FromAt: r[0], UntilAt: r[1]})
		if err != nil {
			return err
		}
		for _, row := range rows {
			day(row.Source, row.Day).Received += row.Received
		}
	}
	unfinished, err := q.StatsUnfinishedByDay(ctx, since)
	if err != nil {
		return err
	}
	for _, sd := range report.Inbox {
		sd.Processed = sd.Received
	}
	for _, u := range unfinished {
		sd := day(u.Source, u.Day)
		sd.Processed, sd.Dead = max(sd.Processed-u.Unfinished, 0), u.Dead
	}
	sort.Slice(report.Inbox, func(i, j int) bool {
		a, b := report.Inbox[i], report.Inbox[j]
		return a.Day < b.Day || a.Day == b.Day && a.Source < b.Source
	})
	dups, err := q.StatsDuplicatesByDay(ctx, since)
	if err != nil {
		return err
	}
	for _, d := range dups {
		if sd := byKey[[2]string{d.Source, d.Day}]; sd != nil {
			sd.Duplicates = d.Duplicates
		}
	}
	for _, sd := range report.Inbox {
		sd.DuplicateRatio = ops.DuplicateRatio(sd.Duplicates, sd.Received)
		sd.SuccessRate = ops.Ratio(sd.Processed, sd.Processed+sd.Dead)
	}
	if *top > 0 {
		rows, err := q.StatsTopDuplicated(ctx, dbsqlc.StatsTopDuplicatedParams{Since: since, MaxRows: int32(*top)})
		if err != nil {
			return err
		}
		for _, r := range rows {
			report.Duplicated = append(report.Duplicated, duplicated{Source: r.Source, EventID: r.EventID, Duplicates: r.Duplicates})
		}
	}
	if report.Endpoints, err = endpointAttempts(ctx, q, since); err != nil {
		return err
	}

	if *asJSON {
		return json.NewEncoder(e.out).Encode(report)
	}
	fmt.Fprintf(e.out, "since %s (UTC days)\n\n", since.Format("2006-01-02"))
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tDAY\tRECEIVED\tDUPLICATES BLOCKED\tDUPLICATE RATIO\tPROCESSED\tDEAD\tSUCCESS RATE")
	for _, sd := range report.Inbox {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%d\t%s\n", sd.Source, sd.Day, sd.Received, sd.Duplicates,
			ops.Percent(sd.DuplicateRatio), sd.Processed, sd.Dead, ops.Percent(sd.SuccessRate))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(report.Duplicated) > 0 {
		fmt.Fprintln(e.out, "\nmost duplicated:")
		tw = tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
		for _, d := range report.Duplicated {
			fmt.Fprintf(tw, "  %s\t%s\t%d duplicates\n", d.Source, oneLine(d.EventID, 60), d.Duplicates)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(e.out)
	tw = tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ENDPOINT\tURL\tATTEMPTS\tSUCCEEDED\tSUCCESS RATE")
	for _, ep := range report.Endpoints {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", ep.EndpointID, oneLine(ep.Endpoint, 50), ep.Attempts, ep.Succeeded, ops.Percent(ep.SuccessRate))
	}
	return tw.Flush()
}

// endpointAttempts counts the delivery attempts per endpoint since a time,
// and those answered 2xx: the hours the attempts' rollup counted from it,
// the rest from the attempts.
func endpointAttempts(ctx context.Context, q *dbsqlc.Queries, since time.Time) ([]endpointStats, error) {
	rolled, live, err := rollupRanges(ctx, q, "outbox_attempts_hourly", since)
	if err != nil {
		return nil, err
	}
	byID := map[uuid.UUID]*endpointStats{}
	add := func(id uuid.UUID, attempts, succeeded int64) {
		ep := byID[id]
		if ep == nil {
			ep = &endpointStats{EndpointID: id.String()}
			byID[id] = ep
		}
		ep.Attempts += attempts
		ep.Succeeded += succeeded
	}
	for _, r := range rolled {
		rows, err := q.StatsRolledEndpointAttempts(ctx, dbsqlc.StatsRolledEndpointAttemptsParams{FromAt: r[0], UntilAt: r[1]})
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			add(row.EndpointID, row.Attempts, row.Succeeded)
		}
	}
	for _, r := range live {
		rows, err := q.StatsEndpointAttempts(ctx, dbsqlc.StatsEndpointAttemptsParams{FromAt: r[0], UntilAt: r[1]})
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			add(row.EndpointID, row.Attempts, row.Succeeded)
		}
	}
	ids := make([]uuid.UUID, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	labels, err := q.DashboardEndpointsByID(ctx, ids)
	if err != nil {
		return nil, err
	}
	for _, l := range labels {
		byID[l.ID].Endpoint = shared.RedactURL(l.Url)
	}
	out := make([]endpointStats, 0, len(byID))
	for id, ep := range byID {
		ep.SuccessRate = ops.Ratio(ep.Succeeded, ep.Attempts)
		if ep.Endpoint == "" {
			ep.Endpoint = ops.DeletedEndpoint(id)
		}
		out = append(out, *ep)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].EndpointID < out[j].EndpointID })
	return out, nil
}

// rollupRanges splits [since, the future) into the ranges an hourly rollup
// (its watermark's name in wharf_rollups) covers ([its watermark -
// jobs.RollupKept, its watermark), once the rollup job has run) and the
// ranges to count from the rows.
func rollupRanges(ctx context.Context, q *dbsqlc.Queries, name string, since time.Time) (rolled, live [][2]time.Time, err error) {
	future := time.Now().Add(24 * time.Hour)
	until, err := q.RollupUntil(ctx, name)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, [][2]time.Time{{since, future}}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	from := until.Add(-jobs.RollupKept)
	if since.After(from) {
		from = since
	}
	if !from.Before(until) {
		return nil, [][2]time.Time{{since, future}}, nil
	}
	if since.Before(from) {
		live = append(live, [2]time.Time{since, from})
	}
	return [][2]time.Time{{from, until}}, append(live, [2]time.Time{until, future}), nil
}
