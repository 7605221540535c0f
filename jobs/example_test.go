package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/jobs"
)

// The periodic jobs in an application's River client: partition upkeep and
// retention run when the client becomes leader, then every Config.Interval.
func ExampleMaintainer_PeriodicJobs() {
	ctx := context.Background()
	pool, cleanup := testdb.ForExample() // a pool on a database migrated with wharf.Migrate
	defer cleanup()

	cfg := &jobs.Config{InboxRetention: 14 * 24 * time.Hour} // the rest: defaults
	maintainer, err := jobs.NewMaintainer(pool, cfg)
	if err != nil {
		fmt.Println(err) // an invalid cfg is refused here, every problem listed
		return
	}
	workers := river.NewWorkers()
	if err := maintainer.AddWorkers(workers); err != nil {
		fmt.Println(err)
		return
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:       map[string]river.QueueConfig{maintainer.Queue(): {MaxWorkers: 2}},
		Workers:      workers,
		PeriodicJobs: maintainer.PeriodicJobs(),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	finished, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
	defer cancel()
	if err := client.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		if err := client.Stop(ctx); err != nil {
			fmt.Println(err)
		}
	}()

	// Wait for both runs, as a test would; an application does not. (The
	// dashboard's rollup job runs on start too, in any order.)
	var ran []string
	timeout := time.After(30 * time.Second)
	for len(ran) < 2 {
		select {
		case ev := <-finished:
			if ev.Job.Kind == "wharf_rollup" {
				continue
			}
			ran = append(ran, ev.Job.Kind+" "+string(ev.Kind))
		case <-timeout:
			fmt.Println("periodic jobs did not run within 30s")
			return
		}
	}
	slices.Sort(ran)
	for _, r := range ran {
		fmt.Println(r)
	}

	// Output:
	// wharf_partition_upkeep job_completed
	// wharf_prune job_completed
}

// Upkeep creates each partitioned table's daily partitions from yesterday
// through PartitionDaysAhead days ahead; a second run finds nothing to do.
// The clock is fixed so that the names are the same on every run.
func ExampleMaintainer_Upkeep() {
	ctx := context.Background()
	pool, cleanup := testdb.ForExample()
	defer cleanup()

	now := time.Date(2020, time.January, 15, 12, 0, 0, 0, time.UTC)
	m, err := jobs.NewMaintainer(pool, &jobs.Config{
		PartitionDaysAhead: 1,
		Now:                func() time.Time { return now },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		res, err := m.Upkeep(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		slices.Sort(res.Created)
		fmt.Println(len(res.Created), "created")
		for _, name := range res.Created {
			fmt.Println(" ", name)
		}
	}

	// Output:
	// 9 created
	//   wharf_inbox_messages_p20200114
	//   wharf_inbox_messages_p20200115
	//   wharf_inbox_messages_p20200116
	//   wharf_outbox_attempts_p20200114
	//   wharf_outbox_attempts_p20200115
	//   wharf_outbox_attempts_p20200116
	//   wharf_outbox_events_p20200114
	//   wharf_outbox_events_p20200115
	//   wharf_outbox_events_p20200116
	// 0 created
}

// A dry run says what retention would drop and what it keeps: a day past
// InboxRetention that still holds an unprocessed message is deferred, not
// dropped, until its rows are finished.
func ExampleMaintainer_Prune() {
	ctx := context.Background()
	pool, cleanup := testdb.ForExample()
	defer cleanup()

	// Partitions for 14–16 January 2020, and a message received on the 15th
	// that no worker has processed yet.
	jan15 := time.Date(2020, time.January, 15, 12, 0, 0, 0, time.UTC)
	upkeep, err := jobs.NewMaintainer(pool, &jobs.Config{PartitionDaysAhead: 1, Now: func() time.Time { return jan15 }})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := upkeep.Upkeep(ctx); err != nil {
		fmt.Println(err)
		return
	}
	ib, err := inbox.New(pool, &inbox.Config{Now: func() time.Time { return jan15 }})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ib.ReceiveTx(ctx, tx, inbox.Incoming{Source: "payments", EventID: "evt_1", Body: []byte(`{}`)})
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	// Retention six weeks later, with the default retentions: inbox
	// messages and outbox events are kept 30 days, attempts 90.
	mar1 := time.Date(2020, time.March, 1, 12, 0, 0, 0, time.UTC)
	m, err := jobs.NewMaintainer(pool, &jobs.Config{Now: func() time.Time { return mar1 }})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := m.Prune(ctx, &jobs.PruneOpts{DryRun: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	slices.Sort(res.Dropped)
	out, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(out))

	// The run itself does what the dry run said.
	res, err = m.Prune(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("dropped:", len(res.Dropped), "deferred:", len(res.Deferred))

	// Output:
	// {
	//   "dry_run": true,
	//   "dropped": [
	//     "wharf_inbox_messages_p20200114",
	//     "wharf_inbox_messages_p20200116",
	//     "wharf_outbox_events_p20200114",
	//     "wharf_outbox_events_p20200115",
	//     "wharf_outbox_events_p20200116"
	//   ],
	//   "deferred": [
	//     {
	//       "name": "wharf_inbox_messages_p20200115",
	//       "unfinished": 1
	//     }
	//   ],
	//   "dedupe_keys_deleted": 0,
	//   "past_keys_deleted": 0,
	//   "idempotency_keys_deleted": 0,
	//   "deliveries_deleted": 0,
	//   "audit_entries_deleted": 0,
	//   "messages_scrubbed": 0,
	//   "events_scrubbed": 0,
	//   "responses_scrubbed": 0
	// }
	// dropped: 5 deferred: 1
}
