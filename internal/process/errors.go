package process

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/inboxjob"
)

// ErrNoHandler is the error recorded for a message for which no handler is
// registered. Package inbox exports it as inbox.ErrNoHandler.
var ErrNoHandler = errors.New("inbox: no handler registered")

// Permanent marks err as permanent: the message is dead at once, without
// retries (package inbox's Permanent).
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// isPermanent reports whether a handler's error fails its message without
// retries: Permanent or river.JobCancel.
func isPermanent(err error) bool {
	var perm *permanentError
	var cancelled *river.JobCancelError
	return errors.As(err, &perm) || errors.As(err, &cancelled)
}

// failureStatus is a message's status after its handler failed with cause
// on attempt of maxAttempts.
func failureStatus(cause error, attempt, maxAttempts int) string {
	if isPermanent(cause) || attempt >= maxAttempts {
		return inboxjob.StatusDead
	}
	return inboxjob.StatusFailed
}

// maxConflictRetries bounds the snoozes of a message's own job (River
// counts them, whatever their cause) under which a lost conflict (see
// lostConflict) runs the job again at once; past it a conflict is a failed
// attempt, with River's backoff, so that a handler that always loses one
// cannot hold a worker for ever.
const maxConflictRetries = 10

// lostConflict reports whether err, a handler's error, is Postgres's
// deadlock_detected (40P01) or serialization_failure (40001): its
// transaction lost a race with another one, which went on; nothing is wrong
// with the message, and running it again succeeds. Permanent (or
// river.JobCancel) is taken at its word.
func lostConflict(err error) bool {
	var pgErr *pgconn.PgError
	return !isPermanent(err) && errors.As(err, &pgErr) &&
		(pgErr.Code == pgerrcode.DeadlockDetected || pgErr.Code == pgerrcode.SerializationFailure)
}

// orderingWaitError is a batch's message that must wait for an earlier one
// of its ordering key: it goes to a job of its own, which parks it.
type orderingWaitError struct{}

func (e *orderingWaitError) Error() string {
	return "inbox: an earlier message of its ordering key is unfinished"
}

// usesNoAttempt reports whether cause, a handler's failure in a batch (or
// a message's wait for its ordering key), is no failed attempt: a snooze,
// a wait, or a lost conflict (see lostConflict).
func usesNoAttempt(cause error) bool {
	var snooze *river.JobSnoozeError
	var waiting *orderingWaitError
	return errors.As(cause, &snooze) || errors.As(cause, &waiting) || lostConflict(cause)
}

// notOwnedError ends a job whose message is no longer its own: skipped,
// erased, replayed onto another job or rescued since the job was given it,
// or since it read it. River cancels the job, which neither runs the
// message nor records anything on it: its new job, if any, runs it.
type notOwnedError struct {
	messageID uuid.UUID
	jobID     int64
}

func (e *notOwnedError) Error() string {
	return fmt.Sprintf("inbox: message %s is no longer job %d's (skipped, erased, replayed or rescued); the job leaves it alone",
		e.messageID, e.jobID)
}

// handlerFailed is what River records of a failed handler, in place of the
// handler's error: that error may quote the payload, and River keeps its
// job rows' errors beyond the reach of Forget and ScrubAfter. The error
// itself is the message's last_error, which they erase.
type handlerFailed struct{ messageID uuid.UUID }

func (e *handlerFailed) Error() string {
	return "inbox: the handler of message " + e.messageID.String() + " failed; its error is the message's last_error"
}

// batchFatalError is a failure that lost the batch's transaction, not just
// one handler's savepoint.
type batchFatalError struct{ err error }

func (e *batchFatalError) Error() string { return e.err.Error() }

// recovered runs fn, turning a panic into an error so that the attempt is
// recorded like any other failure.
func recovered(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("inbox: handler panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return fn()
}
