package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
)

// the same scenario as TestOrderingDeadInBatchStrandsNoLaterMessage,
// but a's failure is retryable (not dead). a still "holds" b inside the batch
// (b parked, no lock on y); y's skip wakes nothing (b still had the batch's
// job); a's retry then finishes a while the skip is uncommitted, so its wake
// stops at y. After the skip commits nothing wakes b.
func TestOrderingRetryableFailureInBatchStrandsNoLaterMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, first, between, _ := interleavedBatch(t)

	var once sync.Once
	skipping := make(chan pgx.Tx, 1)
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if msg.ID != first {
			return applyEffect(ctx, tx, msg)
		}
		failNow := false
		once.Do(func() {
			failNow = true
			skipTx, err := b.pool.Begin(context.Background())
			if err == nil {
				err = b.inbox.SkipTx(context.Background(), skipTx, between, "retired")
			}
			if err != nil {
				t.Errorf("skip: %v", err)
			}
			skipping <- skipTx
		})
		if failNow {
			return errors.New("transient") // retryable: holds b in the batch
		}
		return applyEffect(ctx, tx, msg)
	})
	b.startWorkers(t)
	skipTx := <-skipping
	require.Eventually(t, func() bool {
		m, err := b.inbox.Get(ctx, first)
		return err == nil && m.Status == inbox.StatusProcessed
	}, 30*time.Second, 5*time.Millisecond, "the first message was never processed on its retry")
	require.NoError(t, skipTx.Commit(ctx))

	require.Eventually(t, func() bool { return effectCount(t, b.pool, "evt_3") == 1 }, 15*time.Second, 10*time.Millisecond,
		"the last message was stranded: parked, with nothing left to wake it\n%s", dump(t, b))
}

// single-message worker. f < y < l share a key; l's ordering.Blocked
// locks the FIRST earlier unfinished message (f), not its immediate
// predecessor (y). y is skipped in an open transaction whose wake ran while
// l still had its job; f is then processed and its wake stops at y (still
// unfinished to it). After the skip commits nothing wakes l.
func TestOrderingWaitsForTheImmediatePredecessor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	createEffects(t, b.pool)
	ids := receiveInTurn(t, b, "sub_1", "evt_f", "evt_y", "evt_l")
	f, y := ids[0], ids[1]
	// f's and y's jobs wait.
	_, err := b.pool.Exec(ctx, `UPDATE river_job SET state = 'scheduled', scheduled_at = now() + interval '1 hour'
		WHERE args->>'message_id' = ANY($1::text[])`, []string{f.String(), y.String()})
	require.NoError(t, err)

	skipTx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, b.inbox.SkipTx(ctx, skipTx, y, "retired")) // its wake sees l with a job
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		return applyEffect(ctx, tx, msg)
	})
	b.startWorkers(t)
	// l's job runs: it parks behind y (what the earliest, f, would not
	// make safe) or, y being locked by the skip, waits.
	require.Eventually(t, func() bool {
		var ran bool
		err := b.pool.QueryRow(ctx, `SELECT attempted_at IS NOT NULL FROM river_job
			WHERE id = (SELECT job_id FROM wharf_inbox_messages WHERE id = $1)`, ids[2]).Scan(&ran)
		var parked bool
		if perr := b.pool.QueryRow(ctx, "SELECT job_id IS NULL FROM wharf_inbox_messages WHERE id = $1", ids[2]).Scan(&parked); perr == nil && parked {
			return true
		}
		return err == nil && ran
	}, 15*time.Second, 5*time.Millisecond, "l's job never ran")
	_, err = b.pool.Exec(ctx, `UPDATE river_job SET state = 'available', scheduled_at = now() WHERE args->>'message_id' = $1`, f.String())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return effectCount(t, b.pool, "evt_f") == 1 }, 15*time.Second, 5*time.Millisecond)
	require.NoError(t, skipTx.Commit(ctx))
	require.Eventually(t, func() bool { return effectCount(t, b.pool, "evt_l") == 1 }, 15*time.Second, 10*time.Millisecond,
		"l was stranded: parked, with nothing left to wake it\n%s", dump(t, b))
}

// recordFailure marks a dead message and wakes the next one in
// one transaction; when the wake fails (here: a trigger refuses the woken
// job's insert), the dead mark is lost too, while River cancels the job: the
// message stays 'received' with no live job, holding its key for ever.
func TestOrderingDeadMarkSurvivesAFailedWake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	ids := receiveInTurn(t, b, "sub_1", "evt_m", "evt_n")
	m, n := ids[0], ids[1]
	_, err := b.pool.Exec(ctx, `UPDATE river_job SET state = 'scheduled', scheduled_at = now() + interval '1 hour'
		WHERE args->>'message_id' = $1`, m.String())
	require.NoError(t, err)
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		return inbox.Permanent(errors.New("bad payload"))
	})
	b.startWorkers(t)
	require.Eventually(t, func() bool {
		var parked bool
		err := b.pool.QueryRow(ctx, "SELECT job_id IS NULL FROM wharf_inbox_messages WHERE id = $1", n).Scan(&parked)
		return err == nil && parked
	}, 15*time.Second, 5*time.Millisecond, "n never parked")
	_, err = b.pool.Exec(ctx, `
		CREATE FUNCTION refuse_wake() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.args->>'message_id' = '`+n.String()+`' THEN RAISE EXCEPTION 'refused'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_wake BEFORE INSERT ON river_job FOR EACH ROW EXECUTE FUNCTION refuse_wake();`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE river_job SET state = 'available', scheduled_at = now() WHERE args->>'message_id' = $1`, m.String())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var state string
		err := b.pool.QueryRow(ctx, "SELECT state FROM river_job WHERE args->>'message_id' = $1", m.String()).Scan(&state)
		return err == nil && state == "cancelled"
	}, 15*time.Second, 5*time.Millisecond, "m's job never cancelled")
	got, err := b.inbox.Get(ctx, m)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDead, got.Status, "m's job is cancelled but m is %s (attempts %d)", got.Status, got.Attempts)
}

func dump(t *testing.T, b *testBundle) string {
	rows, err := b.pool.Query(context.Background(), `SELECT m.event_id, m.status, m.job_id, j.state FROM wharf_inbox_messages m LEFT JOIN river_job j ON j.id = m.job_id ORDER BY m.received_at, m.id`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	out := ""
	for rows.Next() {
		var ev, st string
		var job *int64
		var js *string
		_ = rows.Scan(&ev, &st, &job, &js)
		out += fmt.Sprintf("%s %s job=%v jobstate=%v\n", ev, st, deref(job), derefS(js))
	}
	return out
}
func deref(p *int64) any {
	if p == nil {
		return "NULL"
	}
	return *p
}
func derefS(p *string) any {
	if p == nil {
		return "NULL"
	}
	return *p
}

// receiveInTurn receives a payment for each event id, with ordering key
// key, each in a transaction of its own, a millisecond apart on b's clock;
// it returns their message ids.
func receiveInTurn(t *testing.T, b *testBundle, key string, eventIDs ...string) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	for _, m := range payments(eventIDs...) {
		m.OrderingKey = key
		res := receiveMany(t, b.pool, b.inbox, []inbox.Incoming{m})
		ids = append(ids, res[0].MessageID)
		b.clock.Advance(time.Millisecond)
	}
	return ids
}
