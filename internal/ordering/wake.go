package ordering

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/pgxtx"
)

// WakeNextOf is WakeNext for the processed messages of a batch, sharing
// receivedAt. The messages it wakes that share a receipt time and have not
// failed before go to one batch job, processed in one transaction; the
// others to a job each (a failing message keeps its attempts on its own
// job).
func (o *Ordering) WakeNextOf(ctx context.Context, tx pgx.Tx, receivedAt time.Time, finished []*dbsqlc.WharfInboxMessage) error {
	params := dbsqlc.InboxMessagesNextParkedParams{ReceivedAt: receivedAt}
	for _, m := range finished {
		if m.OrderingKey != "" {
			params.Ids = append(params.Ids, m.ID.String())
			params.Sources = append(params.Sources, m.Source)
			params.OrderingKeys = append(params.OrderingKeys, m.OrderingKey)
		}
	}
	if len(params.Ids) == 0 {
		return nil
	}
	parked, err := dbsqlc.New(pgxtx.GenericPlans{DBTX: tx}).InboxMessagesNextParked(ctx, params)
	if err != nil || len(parked) == 0 {
		return err
	}
	heads := make([]parkedHead, len(parked))
	for i, p := range parked {
		heads[i] = parkedHead{id: p.ID, receivedAt: p.ReceivedAt, status: p.Status, source: p.Source, orderingKey: p.OrderingKey}
	}
	// In receipt order, so that a head in another's run comes after it.
	slices.SortFunc(heads, func(a, b parkedHead) int {
		return cmp.Or(a.receivedAt.Compare(b.receivedAt), bytes.Compare(a.id[:], b.id[:]))
	})
	return o.wake(ctx, tx, heads)
}

// parkedHead is a parked message to wake: the next unfinished message of
// its ordering key after one that finished. status is "" when not known.
type parkedHead struct {
	id                  uuid.UUID
	receivedAt          time.Time
	status              string
	source, orderingKey string
}

// wake gives heads, parked messages whose predecessors finished in tx,
// jobs, each with its run: the parked messages of its key that follow it
// unbroken in its receive batch (InboxMessagesParkedRuns), so that a key's
// backlog goes on a batch at a time. One message a job, each job's wake of
// the next waiting for River's next fetch, drained a hot key's backlog at
// some 40 messages a second. A head that has failed before keeps its
// attempts on a job of its own, and wakes no run; the runs of one receipt
// time share batch jobs of up to BatchSize (and inboxjob.MaxMessages)
// messages, a run never split, processed in one transaction in receipt
// order.
func (o *Ordering) wake(ctx context.Context, tx pgx.Tx, heads []parkedHead) error {
	limit := min(o.config.BatchSize, inboxjob.MaxMessages)
	runs, err := runsOf(ctx, tx, heads, limit)
	if err != nil {
		return err
	}
	inserts := o.inserts(heads, runs, limit)
	if len(inserts) == 0 {
		return nil
	}
	if _, err := o.config.Jobs.Assign(ctx, tx, inserts); err != nil {
		return fmt.Errorf("inbox: ordering: wake messages: %w", err)
	}
	return nil
}

// runsOf returns the messages each head wakes: itself and its run (when
// batch jobs take more than one message), or nil when it has nothing to
// wake (finished, given a job, or in an earlier head's run since it was
// found). It sets the status of the heads it reads.
func runsOf(ctx context.Context, tx pgx.Tx, heads []parkedHead, limit int) ([][]uuid.UUID, error) {
	runs := make([][]uuid.UUID, len(heads))
	for i, h := range heads {
		runs[i] = []uuid.UUID{h.id}
	}
	if limit <= 1 {
		return runs, nil
	}
	var params dbsqlc.InboxMessagesParkedRunsParams
	params.RunLimit = int32(limit)
	for _, h := range heads {
		if h.status == inboxjob.StatusFailed {
			continue
		}
		params.Ids = append(params.Ids, h.id.String())
		params.ReceivedAts = append(params.ReceivedAts, h.receivedAt)
		params.Sources = append(params.Sources, h.source)
		params.OrderingKeys = append(params.OrderingKeys, h.orderingKey)
	}
	if len(params.Ids) == 0 {
		return runs, nil
	}
	rows, err := dbsqlc.New(pgxtx.GenericPlans{DBTX: tx}).InboxMessagesParkedRuns(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("inbox: ordering: messages to wake: %w", err)
	}
	byHead := map[uuid.UUID][]dbsqlc.InboxMessagesParkedRunsRow{}
	for _, r := range rows {
		byHead[r.HeadID] = append(byHead[r.HeadID], r)
	}
	taken := map[uuid.UUID]bool{}
	for i, h := range heads {
		if h.status == inboxjob.StatusFailed {
			continue // not asked for: alone, on a job of its own
		}
		runs[i] = takeRun(&heads[i], byHead[h.id], taken)
	}
	return runs, nil
}

// takeRun returns what h wakes of run, the parked messages from h on that
// InboxMessagesParkedRuns found, marking them taken: nil when h is in an
// earlier head's run, or was finished or given a job since it was found.
// It sets h's status.
func takeRun(h *parkedHead, run []dbsqlc.InboxMessagesParkedRunsRow, taken map[uuid.UUID]bool) []uuid.UUID {
	if taken[h.id] {
		return nil // in an earlier head's run
	}
	taken[h.id] = true
	if len(run) == 0 || run[0].ID != h.id || run[0].JobID != nil {
		// Finished, or given a job, since it was found: nothing to wake.
		return nil
	}
	ids := []uuid.UUID{h.id}
	if h.status = run[0].Status; h.status != inboxjob.StatusReceived {
		return ids // failed before: alone, on a job of its own
	}
	for _, r := range run[1:] {
		if r.JobID != nil || r.Status != inboxjob.StatusReceived || taken[r.ID] {
			break // it runs, or waits for its retry: the rest wait for it
		}
		taken[r.ID] = true
		ids = append(ids, r.ID)
	}
	return ids
}

// inserts returns the jobs of the heads' runs: a job of its own for a
// head that failed before (or when batch jobs take one message), batch
// jobs for the runs of each receipt time.
func (o *Ordering) inserts(heads []parkedHead, runs [][]uuid.UUID, limit int) []river.InsertManyParams {
	var inserts []river.InsertManyParams
	groups := map[time.Time][][]uuid.UUID{}
	var times []time.Time
	for i, h := range heads {
		switch {
		case runs[i] == nil:
		case h.status != inboxjob.StatusReceived || limit <= 1:
			inserts = append(inserts, o.config.Jobs.One(h.id, h.receivedAt, false))
		default:
			if _, ok := groups[h.receivedAt]; !ok {
				times = append(times, h.receivedAt)
			}
			groups[h.receivedAt] = append(groups[h.receivedAt], runs[i])
		}
	}
	for _, at := range times {
		inserts = o.batchJobs(inserts, at, groups[at], limit)
	}
	return inserts
}

// batchJobs appends to inserts the jobs of runs, received at: batch jobs
// of up to limit messages each, a run never split (a job of its own for a
// lone message).
func (o *Ordering) batchJobs(inserts []river.InsertManyParams, at time.Time, runs [][]uuid.UUID, limit int) []river.InsertManyParams {
	var ids []uuid.UUID
	flush := func() {
		switch len(ids) {
		case 0:
		case 1:
			inserts = append(inserts, o.config.Jobs.One(ids[0], at, false))
		default:
			slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
			inserts = append(inserts, o.config.Jobs.Batch(at, ids, false)) // ordered runs
		}
		ids = nil
	}
	for _, run := range runs {
		if len(ids)+len(run) > limit {
			flush()
		}
		ids = append(ids, run...)
	}
	flush()
	return inserts
}
