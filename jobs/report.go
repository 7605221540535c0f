package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/partition"
)

// TableReport describes one of Wharf's partitioned tables.
type TableReport struct {
	// Table is the partitioned table's name.
	Table string `json:"table"`
	// Retention is how long its rows are kept.
	Retention time.Duration `json:"retention"`
	// Partitions lists its partitions, oldest first.
	Partitions []PartitionReport `json:"partitions"`
	// OldestUnfinished is the partition key of its oldest unfinished row;
	// nil when every row is finished or the table has no such notion.
	OldestUnfinished *time.Time `json:"oldest_unfinished,omitempty"`
}

// PartitionReport describes one partition.
type PartitionReport struct {
	Name string    `json:"name"`
	Day  time.Time `json:"day"`
	// Rows is exact when the report was asked for exact counts, otherwise
	// the planner's estimate (-1: never analyzed).
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"`
	// Expired is true when the whole day is past retention.
	Expired bool `json:"expired"`
	// DetachPending is true after an interrupted drop; the next prune
	// completes it.
	DetachPending bool `json:"detach_pending,omitempty"`
}

// Report lists every Wharf partitioned table with its partitions. With
// exact, row counts scan each partition.
func (m *Maintainer) Report(ctx context.Context, exact bool) ([]TableReport, error) {
	tables, err := partition.Tables(ctx, m.pool)
	if err != nil {
		return nil, err
	}
	now := m.cfg.Now()
	out := make([]TableReport, 0, len(tables))
	for _, table := range tables {
		policy, known := policyFor(table)
		report := TableReport{Table: table, Partitions: []PartitionReport{}}
		if known {
			report.Retention = policy.retention(m.cfg)
			if policy.oldestUnfinished != nil {
				oldest, err := policy.oldestUnfinished(ctx, dbsqlc.New(m.pool))
				switch {
				case errors.Is(err, pgx.ErrNoRows):
				case err != nil:
					return nil, err
				default:
					report.OldestUnfinished = &oldest
				}
			}
		}
		parts, err := partition.List(ctx, m.pool, table)
		if err != nil {
			return nil, err
		}
		for _, p := range parts {
			pr := PartitionReport{Name: p.Name, Day: p.Day, Rows: p.Rows, Bytes: p.Bytes, DetachPending: p.DetachPending}
			if exact {
				if pr.Rows, err = partition.CountRows(ctx, m.pool, p.Name); err != nil {
					return nil, err
				}
			}
			pr.Expired = known && !p.Day.IsZero() && !p.Day.AddDate(0, 0, 1).After(now.Add(-report.Retention))
			report.Partitions = append(report.Partitions, pr)
		}
		out = append(out, report)
	}
	return out, nil
}

func policyFor(table string) (tablePolicy, bool) {
	for _, p := range tablePolicies {
		if p.table == table {
			return p, true
		}
	}
	return tablePolicy{}, false
}
