// Package ordering keeps the messages of one ordering key in their order:
// a message whose key has an earlier unfinished message waits for it,
// parked, and the finish of each message wakes the next. The inbox's
// workers (internal/process), its rescue and its operator actions (Skip,
// Forget) call it; it inserts the jobs of the messages it wakes through
// internal/inboxjob.
//
// How ordering works. A message whose key has an earlier unfinished
// message (to process, or failing) waits for it, parked: it has no job.
// When a message finishes (processed, or dead: exhausted, Permanent,
// skipped, erased), its transaction gives the next unfinished message of
// its key a job if that one is parked (WakeNext). Parking and waking
// cannot miss each other: the parking transaction holds a SHARE lock on
// the row of the message's immediate predecessor (the last earlier
// unfinished message of its key: the one whose finish, or skip, wakes it),
// which that message's processing (FOR UPDATE) and every update of its
// status wait for, so its wake sees the park. A message that finds its
// predecessor being processed or updated at that moment (its lock taken)
// snoozes briefly and looks again. The batch worker asks once which of its
// messages an earlier one outside the batch holds (the last such one) and
// tracks those inside it itself (BatchOrder); after waiting briefly for
// another batch that holds them, it parks a held message itself when it
// can take the lock without waiting (see ParkHeld), and otherwise hands it
// on to a new job. A batch's finished messages wake the next ones of their
// keys together: one batch job for those received together. Rescue is the
// net under all of it.
package ordering

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/pgxtx"
	"github.com/wharfhq/wharf/internal/shared"
)

// Config configures an Ordering. Every field is required: package inbox
// applies its Config's defaults before it builds the engines.
type Config struct {
	// Jobs inserts the jobs of the messages a wake gives jobs.
	Jobs *inboxjob.Jobs
	// BatchSize caps the messages of a woken batch job (with
	// inboxjob.MaxMessages): package inbox's Config.BatchSize.
	BatchSize int
	// Now returns the current time at Postgres's precision.
	Now func() time.Time
}

// errInvalidConfig wraps each problem New finds with its config.
var errInvalidConfig = errors.New("ordering: invalid config")

func (c *Config) validate() error {
	p := shared.NewProblems(errInvalidConfig)
	if c.Jobs == nil {
		p.Addf("no Jobs")
	}
	if c.BatchSize < 1 {
		p.Addf("BatchSize %d is below 1", c.BatchSize)
	}
	if c.Now == nil {
		p.Addf("no Now")
	}
	return p.Err()
}

// Ordering parks and wakes the messages of ordering keys.
type Ordering struct {
	config Config
}

// New returns an Ordering for cfg, or an error naming what cfg lacks.
func New(cfg *Config) (*Ordering, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Ordering{config: *cfg}, nil
}

// BusyWait is how long a message snoozes when the earlier message of its
// key is being processed at that moment.
const BusyWait = 25 * time.Millisecond

// ErrBusy means the earlier message of an ordering key is being processed
// or updated at this moment: look again shortly (after BusyWait).
var ErrBusy = errors.New("inbox: the earlier message of its ordering key is being processed")

// Blocked reports whether msg must wait for an earlier message of its
// ordering key, locking that message (see the package's doc); it returns
// ErrBusy, leaving tx aborted, when another transaction holds it.
func Blocked(ctx context.Context, tx pgx.Tx, msg *dbsqlc.WharfInboxMessage) (bool, error) {
	if msg.OrderingKey == "" {
		return false, nil
	}
	_, err := dbsqlc.New(tx).InboxMessageEarlierUnfinishedLocked(ctx, dbsqlc.InboxMessageEarlierUnfinishedLockedParams{
		Source: msg.Source, OrderingKey: msg.OrderingKey, ReceivedAt: msg.ReceivedAt, ID: msg.ID,
	})
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable:
		return false, ErrBusy
	case err != nil:
		return false, fmt.Errorf("inbox: ordering check: %w", err)
	}
	return true, nil
}

// Park leaves msg without a job until the earlier message of its key
// finishes and wakes it.
func (o *Ordering) Park(ctx context.Context, tx pgx.Tx, msg *dbsqlc.WharfInboxMessage) error {
	if err := dbsqlc.New(tx).InboxMessagePark(ctx, dbsqlc.InboxMessageParkParams{
		Now: o.config.Now(), ReceivedAt: msg.ReceivedAt, ID: msg.ID,
	}); err != nil {
		return fmt.Errorf("inbox: ordering: park message: %w", err)
	}
	return nil
}

// WakeNext gives the next unfinished message of msg's ordering key a job
// when it is parked: msg has finished, in tx. Of msg it reads the id,
// receipt time, source and ordering key only.
func (o *Ordering) WakeNext(ctx context.Context, tx pgx.Tx, msg *dbsqlc.WharfInboxMessage) error {
	if msg.OrderingKey == "" {
		return nil
	}
	// A generic plan without sequential scans: a custom one, on statistics
	// that say almost no message is unfinished (taken while all were
	// processed), sorted every later unfinished message of the key (the
	// empty later partitions' scans cost nothing) to find the first.
	next, err := dbsqlc.New(pgxtx.GenericPlans{DBTX: tx}).InboxMessageNextWaiting(ctx, dbsqlc.InboxMessageNextWaitingParams{
		Source: msg.Source, OrderingKey: msg.OrderingKey, ReceivedAt: msg.ReceivedAt, ID: msg.ID,
	})
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && next.JobID != nil) {
		return nil // none, or it has a job: it runs, or waits for its retry
	}
	if err != nil {
		return fmt.Errorf("inbox: ordering: next message: %w", err)
	}
	return o.wake(ctx, tx, []parkedHead{{
		id: next.ID, receivedAt: next.ReceivedAt, source: msg.Source, orderingKey: msg.OrderingKey,
	}})
}
