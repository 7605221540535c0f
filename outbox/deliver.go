package outbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/wharfhq/wharf/internal/admission"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/egress"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/telemetry"
)

// DeliveryKind is the River job kind of delivery jobs.
const DeliveryKind = "wharf_outbox_delivery"

// Delivery statuses.
// DeliveryStatus is where a delivery stands.
type DeliveryStatus string

// Delivery statuses.
const (
	// StatusPending: waiting for its first attempt, or being attempted.
	StatusPending DeliveryStatus = outboxtype.StatusPending
	// StatusRetrying: an attempt failed and another is scheduled.
	StatusRetrying DeliveryStatus = outboxtype.StatusRetrying
	// StatusSucceeded: an attempt was answered 2xx.
	StatusSucceeded DeliveryStatus = outboxtype.StatusSucceeded
	// StatusDead: attempts are exhausted, the endpoint answered 410 or was
	// disabled, or the event is gone. Dead deliveries can be replayed.
	StatusDead DeliveryStatus = outboxtype.StatusDead
)

// attemptSucceeded is a succeeded attempt's stored status.
const attemptSucceeded = "succeeded"

// recordTimeout bounds recording an attempt, which runs even when the job's
// context has ended so that a sent request is not forgotten.
const recordTimeout = 10 * time.Second

// maxOrderingWait caps one snooze of a delivery waiting for an earlier one
// with its ordering key, so a replay of that one is noticed soon.
const maxOrderingWait = 5 * time.Minute

// DeliveryArgs are the args of a delivery job: the delivery's id and
// generation, never the payload.
type DeliveryArgs struct {
	// DeliveryID identifies the delivery (one event to one endpoint).
	DeliveryID uuid.UUID `json:"delivery_id"`
	// Generation is the delivery's generation the job was inserted for: 0
	// when published, one more on each replay. A job of an older generation
	// than the delivery's (a replay superseded it) finishes without sending.
	Generation int `json:"generation,omitempty"`
	// AttemptOffset is how many attempts the delivery had before this job:
	// those a batch job made (see DeliveryBatchArgs) before it handed the
	// delivery over to a job of its own.
	AttemptOffset int `json:"attempt_offset,omitempty"`
}

// Kind returns DeliveryKind.
func (DeliveryArgs) Kind() string { return DeliveryKind }

// deliveryWorker makes one attempt of a delivery per run.
type deliveryWorker struct {
	river.WorkerDefaults[DeliveryArgs]
	outbox *Outbox
}

// deliveryJobMargin is how much longer than Config.MaxEndpointTimeout a
// delivery job's River timeout is: the statements around the request.
const deliveryJobMargin = 2*recordTimeout + 30*time.Second

// Timeout is every delivery job's River timeout, whatever the client's
// JobTimeout: Config.MaxEndpointTimeout plus deliveryJobMargin, so that
// River never cuts an attempt short (the endpoint's own timeout bounds the
// request). River's rescuer honours it: a delivery whose process died is
// retried once its job is this old.
func (w *deliveryWorker) Timeout(*river.Job[DeliveryArgs]) time.Duration {
	return w.outbox.config.MaxEndpointTimeout + deliveryJobMargin
}

// NextRetry returns the time Work decided for the next attempt (the
// schedule, stretched by Retry-After or throttling), or the plain schedule
// for a job Work did not finish (rescued after a crash).
func (w *deliveryWorker) NextRetry(job *river.Job[DeliveryArgs]) time.Time {
	if at, ok := w.outbox.retries.take(job.ID); ok {
		return at
	}
	return time.Now().Add(w.outbox.retries.scheduled(attemptOf(job)))
}

// Work makes one delivery attempt. When River cancels the job remotely
// (JobCancel from another process) while it runs, the delivery is
// dead-lettered, since no job will attempt it again.
func (w *deliveryWorker) Work(ctx context.Context, job *river.Job[DeliveryArgs]) error {
	err := w.outbox.work(ctx, job)
	if err != nil && errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely) {
		return w.outbox.deadCancelled(context.WithoutCancel(ctx), job, err)
	}
	return err
}

func (o *Outbox) work(ctx context.Context, job *river.Job[DeliveryArgs]) error {
	log := o.config.Logger.With("delivery_id", job.Args.DeliveryID, "job_id", job.ID, "attempt", attemptOf(job))
	row, err := o.loadDelivery(ctx, job.Args.DeliveryID)
	if errors.Is(err, pgx.ErrNoRows) {
		log.InfoContext(ctx, "outbox: delivery no longer exists (endpoint deleted); nothing to send")
		return nil
	}
	if err != nil {
		return o.databaseError(ctx, log, snoozeCount(job), fmt.Errorf("load delivery: %w", err))
	}
	log = log.With("endpoint_id", row.EndpointID, "event_id", row.EventID)

	switch {
	case int(row.Generation) != job.Args.Generation:
		log.InfoContext(ctx, "outbox: a replay superseded this job; nothing to send",
			"job_generation", job.Args.Generation, "delivery_generation", row.Generation)
		return nil
	case DeliveryStatus(row.Status) == StatusSucceeded || DeliveryStatus(row.Status) == StatusDead:
		// A rerun of a job whose outcome was recorded (the worker stopped
		// before River marked the job done).
		return nil
	case !row.Enabled:
		return o.deadWithoutAttempt(ctx, log, row, "endpoint disabled")
	case row.Payload == nil:
		return o.deadWithoutAttempt(ctx, log, row, "event no longer stored")
	case attemptOf(job) > o.retries.attemptLimit(job):
		// Only reachable when a run ended without recording its outcome
		// (a crash, a panic, a failure to record) after the last attempt.
		return o.deadWithoutAttempt(ctx, log, row, "attempts exhausted; the outcome of the last one is unknown")
	}

	wait, probeDue := o.gate.Circuit(row)
	if wait > 0 {
		return o.snooze(ctx, admission.ReasonCircuit, wait)
	}
	auth, authErr := o.keys.DecodeAuth(row.EndpointID, row.Auth)
	if authErr != nil && !errors.Is(authErr, ErrSecretDecrypt) {
		return fmt.Errorf("outbox: delivery %s: %w", row.ID, authErr)
	}
	if row.Ordered && row.OrderingKey != "" {
		wait, blocked, err := o.orderingWait(ctx, row)
		if err != nil {
			return o.databaseError(ctx, log, snoozeCount(job), fmt.Errorf("ordering check: %w", err))
		}
		if blocked {
			return o.snooze(ctx, deferOrdering, wait)
		}
	}

	// The secrets are decrypted only here, where they are used. A key missing
	// from Config.SecretKeys, or a value altered, makes an attempt that
	// sends nothing, whose error says which, retried on the schedule (the
	// key may be on its way to this node).
	secrets, err := o.signingSecrets(row, o.config.now())
	if err == nil {
		err = authErr
	}
	if err != nil {
		return o.finishAttempt(context.WithoutCancel(ctx), log, job, row, nil, o.config.now(), &sendOutcome{Outcome: &egress.Outcome{Err: err}})
	}

	// An endpoint stored with a longer timeout than MaxEndpointTimeout
	// allows (set before the limit was lowered) gets the limit: the job's
	// own River timeout must never cut a request short.
	timeout := min(row.Timeout, o.config.MaxEndpointTimeout)
	ticket, err := o.gate.Admit(ctx, row, admission.Request{Hold: timeout, Probe: probeDue, Snoozes: snoozeCount(job)})
	if err != nil {
		return o.deferOrFail(ctx, log, snoozeCount(job), err)
	}
	defer ticket.Release()
	if err := ticket.AwaitToken(ctx); err != nil {
		// The client is stopping: River makes the job available again.
		return err
	}
	if ticket.Probe() {
		log = log.With("circuit_probe", true)
		log.InfoContext(ctx, "outbox: probing the endpoint, whose circuit is half-open")
	}

	attemptedAt := o.config.now()
	out := o.attemptSend(ctx, row, attemptOf(job), secrets, auth, timeout)
	if ctx.Err() != nil && !out.Succeeded() {
		switch {
		case errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely):
			// No job will try again: the attempt is the last one.
			out.cancelled = true
		case errors.Is(ctx.Err(), context.Canceled):
			// The client is stopping: an attempt (the receiver may have
			// got it), which River counts too, but no verdict on the
			// endpoint, nor on its circuit.
			out.MarkCutOff()
		}
	}
	ticket.Sent(!out.CutOff)
	return o.finishAttempt(context.WithoutCancel(ctx), log, job, row, ticket, attemptedAt, out)
}

// attemptSend sends row's delivery, attempt number attempt, in a span.
func (o *Outbox) attemptSend(ctx context.Context, row *outboxtype.Delivery, attempt int,
	secrets []string, auth *outboxtype.Auth, timeout time.Duration,
) *sendOutcome {
	sendCtx, span := o.tracer.Start(telemetry.Parent(ctx, row.TraceContext), "wharf.outbox.deliver",
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("wharf.endpoint_id", row.EndpointID.String()),
			attribute.String("wharf.delivery_id", row.ID.String()),
			attribute.Int("wharf.attempt", attempt),
		))
	out := &sendOutcome{Outcome: o.egress.Send(sendCtx, &egress.Request{
		EndpointID: row.EndpointID,
		URL:        row.URL,
		EventID:    row.EventID,
		Secrets:    secrets,
		Headers:    row.Headers,
		Auth:       auth,
		Body:       row.Payload,
		Timeout:    timeout,
	})}
	span.SetAttributes(attribute.String("wharf.outcome", out.Label()), attribute.Int("http.response.status_code", out.StatusCode))
	if !out.Succeeded() {
		span.SetStatus(codes.Error, out.Label())
	}
	span.End()
	return out
}

// finishAttempt records an attempt, updates endpoint health and returns
// what River should do with the job. ticket is the attempt's admission,
// nil when none was needed: a recorded attempt gave back its slot.
func (o *Outbox) finishAttempt(ctx context.Context, log *slog.Logger, job *river.Job[DeliveryArgs],
	row *outboxtype.Delivery, ticket *admission.Ticket, attemptedAt time.Time, out *sendOutcome,
) error {
	attempt := attemptOf(job)
	s, err := o.settleAttempt(ctx, log, attempt, o.retries.attemptLimit(job), row, ticket.Slot(), attemptedAt, out)
	if err == nil {
		ticket.Recorded()
	}
	switch {
	case err != nil:
		return err
	case s.status == StatusDead:
		return river.JobCancel(fmt.Errorf("outbox: dead after attempt %d: %s", attempt, out.errorText()))
	case s.status == StatusRetrying:
		o.retries.decide(job.ID, time.Now().Add(s.wait))
		return fmt.Errorf("outbox: attempt %d failed: %s", attempt, out.errorText())
	}
	return nil
}

// settled is where an attempt left its delivery.
type settled struct {
	// status is the delivery's new status; empty when the attempt was not
	// recorded, the delivery being no longer its to record.
	status DeliveryStatus
	// wait is how long after now the next attempt is due (StatusRetrying).
	wait time.Duration
	// endpointVersion is the endpoint's version as the attempt was
	// recorded: a batch job that finds it changed hands the rest on.
	endpointVersion int64
}

// settleAttempt records attempt number attempt (of limit) of row, which
// held slot (admission.NoSlot: none), updates endpoint health and says
// where it left the delivery. An error means the attempt could not be
// recorded, nor its slot freed; otherwise the record freed the slot.
func (o *Outbox) settleAttempt(ctx context.Context, log *slog.Logger, attempt, limit int,
	row *outboxtype.Delivery, slot int32, attemptedAt time.Time, out *sendOutcome,
) (settled, error) {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()

	rec := &attemptRecord{row: row, slot: slot, attemptedAt: attemptedAt, out: out, status: StatusSucceeded}
	// The SSRF guard's refusal is no transient failure: the address is
	// refused on every try, so the delivery is dead at once.
	final := attempt >= limit || out.Gone() || out.cancelled || out.Refused()
	var wait time.Duration
	if !out.Succeeded() {
		rec.status = StatusRetrying
		if final {
			rec.status = StatusDead
		} else {
			wait = o.retries.wait(attempt, out.Outcome)
			next := attemptedAt.Add(out.Duration + wait)
			rec.nextAttemptAt = &next
		}
	}
	changed, err := o.recordAttempt(ctx, rec)
	o.metrics.attempt(ctx, out.Outcome, row.EventCreatedAt, err == nil && rec.status == StatusDead)
	if errors.Is(err, pgx.ErrNoRows) {
		// The delivery is no longer this job's to record: its endpoint was
		// deleted, a replay took it over, or it finished meanwhile.
		log.InfoContext(ctx, "outbox: attempt not recorded; the delivery was deleted, replayed or finished meanwhile",
			"status_code", out.StatusCode)
		return settled{}, nil
	}
	if err != nil {
		return settled{}, fmt.Errorf("outbox: delivery %s: %w", row.ID, err)
	}

	attrs := []any{"status_code", out.StatusCode, "duration", out.Duration}
	if changed.disabledReason != "" {
		log.WarnContext(ctx, "outbox: endpoint disabled", append(attrs, "reason", changed.disabledReason)...)
		o.hook(ctx, "OnEndpointDisabled", func() {
			if o.config.OnEndpointDisabled != nil {
				o.config.OnEndpointDisabled(ctx, DisabledEndpoint{EndpointID: row.EndpointID, Reason: changed.disabledReason})
			}
		})
	}
	o.circuitChanged(ctx, log, row, changed)
	if rec.status == StatusDead {
		o.onDead(ctx, DeadDelivery{DeliveryID: row.ID, EndpointID: row.EndpointID, EventID: row.EventID, Reason: out.errorText()})
	}
	switch rec.status {
	case StatusSucceeded:
		log.DebugContext(ctx, "outbox: delivered", attrs...)
	case StatusDead:
		log.WarnContext(ctx, "outbox: delivery dead-lettered", append(attrs, "error", out.errorText())...)
	default:
		log.InfoContext(ctx, "outbox: attempt failed; will retry", append(attrs, "error", out.errorText(), "retry_in", wait)...)
	}
	return settled{status: rec.status, wait: wait, endpointVersion: changed.endpointVersion}, nil
}

// deadWithoutAttempt dead-letters a delivery that cannot be attempted and
// ends its job.
func (o *Outbox) deadWithoutAttempt(ctx context.Context, log *slog.Logger, row *outboxtype.Delivery, reason string) error {
	dead, err := o.queries.OutboxDeliveryMarkDead(ctx, dbsqlc.OutboxDeliveryMarkDeadParams{
		ID: row.ID, Generation: row.Generation, Reason: reason, Now: o.config.now(),
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Replayed, finished or deleted meanwhile: no longer this job's,
		// which ends as one that finds its delivery so when it loads it.
		log.InfoContext(ctx, "outbox: delivery no longer this job's; not dead-lettered", "reason", reason)
		return nil
	case err != nil:
		return fmt.Errorf("outbox: dead-letter delivery %s: %w", row.ID, err)
	}
	o.markedDead(ctx, dead, reason)
	log.InfoContext(ctx, "outbox: delivery dead-lettered without an attempt", "reason", reason)
	return river.JobCancel(fmt.Errorf("outbox: delivery dead: %s", reason))
}

// reasonCancelled is the dead delivery's error when its job was cancelled.
const reasonCancelled = "cancelled: its River job was cancelled"

// sendOutcome is what an attempt learned, and whether River cancelled its
// job while it ran: the attempt is then the last.
type sendOutcome struct {
	*egress.Outcome
	cancelled bool
}

// errorText describes a failed attempt without secrets, the URL (its query
// may hold a token) or the body.
func (s *sendOutcome) errorText() string {
	text := s.Failure()
	if s.cancelled && text != "" {
		return reasonCancelled + "; the attempt: " + text
	}
	return text
}

// deadCancelled dead-letters the delivery of a job River cancelled remotely
// while it ran (unless the run recorded an outcome already): no job is left
// to attempt it. A replay sends it again. err is what the run returned.
func (o *Outbox) deadCancelled(ctx context.Context, job *river.Job[DeliveryArgs], err error) error {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	log := o.config.Logger.With("job_id", job.ID)
	o.deadLetterCancelled(ctx, log, job.Args.DeliveryID, job.Args.Generation)
	return river.JobCancel(err)
}

// deadLetterCancelled dead-letters delivery id of a cancelled job, unless it
// is finished or no longer at generation, and logs what it did.
func (o *Outbox) deadLetterCancelled(ctx context.Context, log *slog.Logger, id uuid.UUID, generation int) {
	dead, err := o.queries.OutboxDeliveryMarkDead(ctx, dbsqlc.OutboxDeliveryMarkDeadParams{
		ID: id, Generation: int32(generation), Reason: reasonCancelled, Now: o.config.now(),
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Finished, handed over, replayed or deleted: not the job's.
	case err != nil:
		log.ErrorContext(ctx, "outbox: job cancelled, but its delivery could not be dead-lettered; Rescue will",
			"delivery_id", id, "error", err)
	default:
		o.markedDead(ctx, dead, reasonCancelled)
		log.WarnContext(ctx, "outbox: job cancelled; delivery dead-lettered", "delivery_id", id, "reason", reasonCancelled)
	}
}

// deferOrFail ends a run that Admit did not admit: a *admission.Deferral
// snoozes the job, any other error is a database error (databaseError).
func (o *Outbox) deferOrFail(ctx context.Context, log *slog.Logger, snoozes int, err error) error {
	var d *admission.Deferral
	if errors.As(err, &d) {
		return o.snooze(ctx, d.Reason, d.Wait)
	}
	return o.databaseError(ctx, log, snoozes, err)
}

// databaseError decides what a database error before the attempt (err
// says which statement's) means for the job. A transient one (connection
// lost, serialisation failure, server shutting down…) snoozes the job,
// which uses no attempt, for a short, growing, jittered wait; the job's
// context ending is returned as it is (River retries a stopping client's
// job, and Work handles a remote cancellation); any other error fails the
// run like an attempt.
func (o *Outbox) databaseError(ctx context.Context, log *slog.Logger, snoozes int, err error) error {
	err = fmt.Errorf("outbox: %w", err)
	if ctx.Err() != nil || !transientDatabaseError(err) {
		return err
	}
	wait := o.gate.AfterDatabaseError(snoozes)
	log.WarnContext(ctx, "outbox: database error; snoozing without using an attempt",
		"error", err, "retry_in", wait)
	return o.snooze(ctx, deferDatabase, wait)
}

// transientDatabaseError reports whether err is a database error that a
// later try may not meet: the connection failed or broke, or the server
// reported a condition of the moment (serialisation failure or deadlock,
// insufficient resources, shutdown or a cancelled statement, a lock not
// available). A server error of any other class (a bad query, a constraint)
// is not transient.
func transientDatabaseError(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgerrcode.IsConnectionException(pgErr.Code) ||
			pgerrcode.IsTransactionRollback(pgErr.Code) ||
			pgerrcode.IsInsufficientResources(pgErr.Code) ||
			pgerrcode.IsOperatorIntervention(pgErr.Code) ||
			pgErr.Code == pgerrcode.LockNotAvailable
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return pgconn.SafeToRetry(err) || errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// orderingWait reports whether an earlier delivery with the same ordering
// key to the same endpoint is unfinished, and how long to wait for it.
func (o *Outbox) orderingWait(ctx context.Context, row *outboxtype.Delivery) (time.Duration, bool, error) {
	earlier, err := o.queries.OutboxDeliveryEarlierPending(ctx, dbsqlc.OutboxDeliveryEarlierPendingParams{
		EndpointID: row.EndpointID, OrderingKey: row.OrderingKey, Seq: row.Seq,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	wait := o.gate.Busy()
	if earlier.NextAttemptAt != nil {
		wait = max(wait, min(earlier.NextAttemptAt.Sub(o.config.now()), maxOrderingWait))
	}
	return wait, true, nil
}

// markedDead counts a delivery a worker dead-lettered without an attempt
// and calls Config.OnDead for it.
func (o *Outbox) markedDead(ctx context.Context, dead dbsqlc.OutboxDeliveryMarkDeadRow, reason string) {
	o.metrics.dead.Add(ctx, 1)
	o.onDead(ctx, DeadDelivery{DeliveryID: dead.ID, EndpointID: dead.EndpointID, EventID: outboxtype.FormatEventID(dead.EventID), Reason: reason})
}

// onDead calls Config.OnDead, if set, with d.
func (o *Outbox) onDead(ctx context.Context, d DeadDelivery) {
	if o.config.OnDead == nil {
		return
	}
	o.hook(ctx, "OnDead", func() { o.config.OnDead(ctx, d) })
}

// hook runs an application callback, recovering a panic.
func (o *Outbox) hook(ctx context.Context, name string, fn func()) {
	defer func() {
		if r := recover(); r != nil {
			o.config.Logger.ErrorContext(ctx, "outbox: "+name+" panicked", "panic", fmt.Sprint(r))
		}
	}()
	fn()
}
