package delivery

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
	"github.com/wharfhq/wharf/internal/groupcommit"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/pgxtx"
	"github.com/wharfhq/wharf/internal/secretbox"
	"github.com/wharfhq/wharf/internal/shared"
	"github.com/wharfhq/wharf/internal/telemetry"
)

// Worker makes one attempt of a delivery per run of its own job (Args).
type Worker struct {
	river.WorkerDefaults[Args]
	engine *Engine
}

// jobMargin is how much longer than Config.MaxEndpointTimeout a delivery
// job's River timeout is: the statements around the request.
const jobMargin = 2*recordTimeout + 30*time.Second

// Timeout is every delivery job's River timeout, whatever the client's
// JobTimeout: Config.MaxEndpointTimeout plus jobMargin, so that River
// never cuts an attempt short (the endpoint's own timeout bounds the
// request). River's rescuer honours it: a delivery whose process died is
// retried once its job is this old.
func (w *Worker) Timeout(*river.Job[Args]) time.Duration {
	return w.engine.config.MaxEndpointTimeout + jobMargin
}

// NextRetry returns when the next attempt goes: after the wait Work
// decided (the schedule, stretched by Retry-After or throttling), or the
// plain schedule for a job Work did not finish (rescued after a crash).
func (w *Worker) NextRetry(job *river.Job[Args]) time.Time {
	if job.Args.retrySet {
		return time.Now().Add(job.Args.retryIn)
	}
	return time.Now().Add(w.engine.retries.scheduled(attemptOf(job)))
}

// Work makes one delivery attempt. When River cancels the job remotely
// (JobCancel from another process) while it runs, the delivery is
// dead-lettered, since no job will attempt it again.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	log := w.engine.config.Logger.With("job_id", job.ID, "delivery_id", job.Args.DeliveryID)
	err := w.engine.work(ctx, job)
	logUnlogged(ctx, log, err)
	return w.engine.whenCancelled(ctx, err, log, Ref{DeliveryID: job.Args.DeliveryID, Generation: job.Args.Generation})
}

// loggedError is an error a worker returns to River having logged it (a
// failed attempt): wharfriver.Configure leaves River's own line for it out.
type loggedError struct{ error }

func (e loggedError) Unwrap() error { return e.error }

// logUnlogged logs err, a worker's error for River, unless it was logged
// already, is a snooze or a cancellation (no failure), or is the client's
// stop: wharfriver.Configure leaves River's line for a failed job of
// Wharf's out, so that each failure is logged once, with the delivery.
func logUnlogged(ctx context.Context, log *slog.Logger, err error) {
	var logged loggedError
	var snooze *river.JobSnoozeError
	var cancelled *river.JobCancelError
	if err == nil || errors.As(err, &logged) || errors.As(err, &snooze) || errors.As(err, &cancelled) || errors.Is(err, context.Canceled) {
		return
	}
	log.WarnContext(ctx, "outbox: the job failed; River runs it again", "error", err)
}

// attemptOf is the delivery's attempt number of job's current run: River's
// count of the job's runs, plus the attempts made before the job (a batch
// job's).
func attemptOf(job *river.Job[Args]) int {
	return job.Attempt + job.Args.AttemptOffset
}

// snoozeCount returns how often River has snoozed job (0 for a job without
// its row).
func snoozeCount(job *river.Job[Args]) int {
	if job.JobRow == nil {
		return 0
	}
	return shared.SnoozeCount(job.Metadata)
}

func (e *Engine) work(ctx context.Context, job *river.Job[Args]) error {
	attempt := attemptOf(job)
	log := e.config.Logger.With("delivery_id", job.Args.DeliveryID, "job_id", job.ID, "attempt", attempt)
	d, err := e.load(ctx, job.Args.DeliveryID)
	if errors.Is(err, pgx.ErrNoRows) {
		log.InfoContext(ctx, "outbox: delivery no longer exists (endpoint deleted); nothing to send")
		return nil
	}
	if err != nil {
		return e.databaseError(ctx, log, snoozeCount(job), fmt.Errorf("load delivery: %w", err))
	}
	log = log.With("endpoint_id", d.EndpointID, "event_id", d.EventID)

	v := e.gate(d, job.Args.Generation)
	switch {
	case v.stale && int(d.Generation) != job.Args.Generation:
		log.InfoContext(ctx, "outbox: a replay superseded this job; nothing to send",
			"job_generation", job.Args.Generation, "delivery_generation", d.Generation)
		return nil
	case v.stale:
		// A rerun of a job whose outcome was recorded (the worker stopped
		// before River marked the job done).
		return nil
	case v.dead != "":
		return e.deadWithoutAttempt(ctx, log, d, v.dead)
	case attempt > e.retries.attemptLimit(job):
		// Only reachable when a run ended without recording its outcome
		// (a crash, a panic, a failure to record) after the last attempt.
		return e.deadWithoutAttempt(ctx, log, d, "attempts exhausted; the outcome of the last one is unknown")
	case v.wait > 0:
		return e.snooze(ctx, admission.ReasonCircuit, v.wait)
	case v.authErr != nil && !errors.Is(v.authErr, secretbox.ErrDecrypt):
		return fmt.Errorf("outbox: delivery %s: %w", d.ID, v.authErr)
	}
	if d.Ordered && d.OrderingKey != "" {
		wait, blocked, err := e.orderingWait(ctx, d)
		if err != nil {
			return e.databaseError(ctx, log, snoozeCount(job), fmt.Errorf("ordering check: %w", err))
		}
		if blocked {
			return e.snooze(ctx, deferOrdering, wait)
		}
	}
	if err := v.openErr(); err != nil {
		// A key missing from outbox.Config.SecretKeys, or a value
		// altered, makes an attempt that sends nothing, whose error says
		// which, retried on the schedule (the key may be on its way to
		// this node).
		return e.finish(context.WithoutCancel(ctx), log, job, d, nil, e.now(), &outcome{Outcome: &egress.Outcome{Err: err}})
	}

	ticket, err := e.admission.Admit(ctx, d, admission.Request{Hold: e.timeout(d), Probe: v.probe, Snoozes: snoozeCount(job)})
	if err != nil {
		return e.deferOrFail(ctx, log, snoozeCount(job), err)
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
	if ctx.Err() != nil {
		// Stopping before anything was sent: no attempt; River gives the
		// run back.
		return ctx.Err()
	}
	attemptedAt := e.now()
	out, _ := e.send(ctx, d, attempt, &v)
	ticket.Sent(!out.CutOff)
	return e.finish(context.WithoutCancel(ctx), log, job, d, ticket, attemptedAt, out)
}

// finish records an attempt, updates endpoint health and returns what
// River should do with the job. ticket is the attempt's admission, nil
// when it was never admitted: a recorded attempt gave back its slot.
func (e *Engine) finish(ctx context.Context, log *slog.Logger, job *river.Job[Args],
	d *outboxtype.Delivery, ticket *admission.Ticket, attemptedAt time.Time, out *outcome,
) error {
	attempt := attemptOf(job)
	slot := int32(admission.NoSlot)
	if ticket != nil {
		slot = ticket.Slot()
	}
	s, err := e.settle(ctx, log, attempt, e.retries.attemptLimit(job), d, slot, attemptedAt, out)
	if err != nil {
		return err
	}
	if ticket != nil {
		ticket.Recorded()
	}
	switch s.status {
	case outboxtype.StatusDead:
		return river.JobCancel(fmt.Errorf("outbox: dead after attempt %d: %s", attempt, out.errorText()))
	case outboxtype.StatusRetrying:
		if out.CutOff {
			// The client is stopping: River gives the run back (its
			// attempt too), and the job's next run makes this attempt
			// again, as soon as a worker can.
			return context.Canceled
		}
		job.Args.retryIn, job.Args.retrySet = s.wait, true
		// settle logged it.
		return loggedError{fmt.Errorf("outbox: attempt %d failed: %s", attempt, out.errorText())}
	}
	return nil
}

// deadWithoutAttempt dead-letters a delivery that cannot be attempted and
// ends its job.
func (e *Engine) deadWithoutAttempt(ctx context.Context, log *slog.Logger, d *outboxtype.Delivery, reason string) error {
	dead, err := e.queries.OutboxDeliveryMarkDead(ctx, dbsqlc.OutboxDeliveryMarkDeadParams{
		ID: d.ID, Generation: d.Generation, Reason: reason, Now: e.now(),
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Replayed, finished or deleted meanwhile: no longer this job's,
		// which ends as one that finds its delivery so when it loads it.
		log.InfoContext(ctx, "outbox: delivery no longer this job's; not dead-lettered", "reason", reason)
		return nil
	case err != nil:
		return fmt.Errorf("outbox: dead-letter delivery %s: %w", d.ID, err)
	}
	e.markedDead(ctx, dead, reason)
	log.InfoContext(ctx, "outbox: delivery dead-lettered without an attempt", "reason", reason)
	return river.JobCancel(fmt.Errorf("outbox: delivery dead: %s", reason))
}

// reasonCancelled is the dead delivery's error when its job was cancelled.
const reasonCancelled = "cancelled: its River job was cancelled"

// whenCancelled is what a worker's run that ended with err returns: err,
// unless River cancelled the job remotely while it ran; the job's
// deliveries (refs) are then dead-lettered (unless the run recorded an
// outcome or handed them over already): no job is left to attempt them. A
// replay sends them again.
func (e *Engine) whenCancelled(ctx context.Context, err error, log *slog.Logger, refs ...Ref) error {
	if err == nil || !errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	for _, ref := range refs {
		dead, err := e.queries.OutboxDeliveryMarkDead(ctx, dbsqlc.OutboxDeliveryMarkDeadParams{
			ID: ref.DeliveryID, Generation: int32(ref.Generation), Reason: reasonCancelled, Now: e.now(),
		})
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// Finished, handed over, replayed or deleted: not the job's.
		case err != nil:
			log.ErrorContext(ctx, "outbox: job cancelled, but its delivery could not be dead-lettered; Rescue will",
				"delivery_id", ref.DeliveryID, "error", err)
		default:
			e.markedDead(ctx, dead, reasonCancelled)
			log.WarnContext(ctx, "outbox: job cancelled; delivery dead-lettered", "delivery_id", ref.DeliveryID, "reason", reasonCancelled)
		}
	}
	return river.JobCancel(err)
}

// recordTimeout bounds recording an attempt, which runs even when the job's
// context has ended so that a sent request is not forgotten.
const recordTimeout = 10 * time.Second

// maxOrderingWait caps one snooze of a delivery waiting for an earlier one
// with its ordering key, so a replay of that one is noticed soon.
const maxOrderingWait = 5 * time.Minute

// Deferral reasons of the engine's own, beside admission's, the reason
// label of wharf_outbox_deferred_total: why a delivery's run ended without
// an attempt, to run again later.
const (
	deferOrdering = "ordering" // an earlier delivery with its ordering key is unfinished
	deferDatabase = "database" // a transient database error
)

// load returns everything an attempt of delivery id needs, loaded with the
// other deliveries the node starts at the same time; pgx.ErrNoRows when the
// delivery no longer exists.
func (e *Engine) load(ctx context.Context, id uuid.UUID) (*outboxtype.Delivery, error) {
	return e.loads.Do(ctx, id)
}

// loadMany runs with a generic plan: a custom one, which Postgres chose on
// every call (the events are day-partitioned), cost twice the lookup's run
// to plan.
func (e *Engine) loadMany(ctx context.Context, ids []uuid.UUID) ([]*outboxtype.Delivery, []error) {
	rows, err := dbsqlc.New(pgxtx.GenericPlans{DBTX: e.pool}).OutboxDeliveryGetForWork(ctx, pgxtx.UUIDTexts(ids))
	if err != nil {
		return make([]*outboxtype.Delivery, len(ids)), groupcommit.Fail(len(ids), err)
	}
	byID := make(map[uuid.UUID]*outboxtype.Delivery, len(rows))
	for i := range rows {
		byID[rows[i].ID] = attemptFromRow(&rows[i])
	}
	outs := make([]*outboxtype.Delivery, len(ids))
	var errs []error
	for i, id := range ids {
		if outs[i] = byID[id]; outs[i] == nil {
			if errs == nil {
				errs = make([]error, len(ids))
			}
			errs[i] = pgx.ErrNoRows
		}
	}
	return outs, errs
}

// attemptFromRow is the attempt value of a loaded row: the one place a
// worker reads the row.
func attemptFromRow(row *dbsqlc.OutboxDeliveryGetForWorkRow) *outboxtype.Delivery {
	return &outboxtype.Delivery{
		ID:                      row.ID,
		Seq:                     row.Seq,
		EventID:                 outboxtype.FormatEventID(row.EventID),
		EventCreatedAt:          row.EventCreatedAt,
		EndpointID:              row.EndpointID,
		OrderingKey:             row.OrderingKey,
		Status:                  row.Status,
		Attempts:                row.Attempts,
		Generation:              row.Generation,
		ThrottledUntil:          row.ThrottledUntil,
		URL:                     row.Url,
		Secret:                  row.Secret,
		PreviousSecret:          row.PreviousSecret,
		PreviousSecretExpiresAt: row.PreviousSecretExpiresAt,
		MaxInFlight:             row.MaxInFlight,
		Timeout:                 time.Duration(row.TimeoutMs) * time.Millisecond,
		Ordered:                 row.Ordered,
		Enabled:                 row.Enabled,
		Headers:                 outboxtype.DecodeHeaders(row.Headers),
		Auth:                    row.Auth,
		RateLimitPerSecond:      row.RateLimitPerSecond,
		CircuitState:            row.CircuitState,
		CircuitOpenUntil:        row.CircuitOpenUntil,
		CircuitProbeExpiresAt:   row.CircuitProbeExpiresAt,
		EndpointVersion:         row.EndpointVersion,
		Payload:                 row.Payload,
		TraceContext:            row.TraceContext,
		DBNow:                   row.DbNow,
	}
}

// verdict is what the gate says of an attempt of a loaded delivery.
type verdict struct {
	// stale: the delivery is no longer the job's (a replay moved it to a
	// newer generation, or it finished: a rerun of a job whose outcome
	// was recorded): end without sending.
	stale bool
	// dead says why the delivery cannot be attempted at all.
	dead string
	// wait, when positive, is how long its endpoint's circuit holds it;
	// probe says it may become the circuit's probe.
	wait  time.Duration
	probe bool
	// ownJob: its endpoint orders it by its key, or limits its rate: only a
	// job of its own sends it.
	ownJob bool
	// secrets and auth sign and authorise it, opened; authErr and
	// secretsErr say why they could not be (secretbox.ErrDecrypt: the
	// attempt fails, sending nothing; any other error of the stored auth
	// fails the run).
	secrets             []string
	auth                *outboxtype.Auth
	authErr, secretsErr error
}

// openErr is why the delivery's secrets or auth could not be opened, nil
// when they were.
func (v *verdict) openErr() error {
	if v.secretsErr != nil {
		return v.secretsErr
	}
	return v.authErr
}

// sendable reports whether a batch job may send the delivery as it is:
// anything else is handed over to a job of its own, which knows what to do.
func (v *verdict) sendable() bool {
	return !v.stale && v.dead == "" && v.wait == 0 && !v.probe && !v.ownJob && v.openErr() == nil
}

// gate passes a loaded delivery, of a job inserted for generation, through
// the checks that need no statement, in the order a delivery's own job
// acts on them: still the job's, attemptable, its circuit, and (only when
// it may go) its secrets, which are decrypted only here, where they are
// used. Both workers gate every delivery with it.
func (e *Engine) gate(d *outboxtype.Delivery, generation int) verdict {
	switch {
	case int(d.Generation) != generation || d.Status == outboxtype.StatusSucceeded || d.Status == outboxtype.StatusDead:
		return verdict{stale: true}
	case !d.Enabled:
		return verdict{dead: "endpoint disabled"}
	case d.Payload == nil:
		return verdict{dead: "event no longer stored"}
	}
	v := verdict{ownJob: d.RateLimitPerSecond > 0 || (d.Ordered && d.OrderingKey != "")}
	if v.wait, v.probe = e.admission.Circuit(d); v.wait > 0 {
		return v
	}
	v.auth, v.authErr = e.keys.DecodeAuth(d.EndpointID, d.Auth)
	v.secrets, v.secretsErr = e.signingSecrets(d, e.now())
	return v
}

// signingSecrets returns the secrets a delivery at now is signed with,
// decrypted: the current one and, during a rotation's overlap, the
// previous one. Its errors match secretbox.ErrDecrypt.
func (e *Engine) signingSecrets(d *outboxtype.Delivery, now time.Time) ([]string, error) {
	secret, err := e.keys.Open(d.EndpointID, secretbox.FieldSecret, d.Secret)
	if err != nil {
		return nil, err
	}
	secrets := []string{secret}
	if d.PreviousSecret != nil && d.PreviousSecretExpiresAt != nil && now.Before(*d.PreviousSecretExpiresAt) {
		previous, err := e.keys.Open(d.EndpointID, secretbox.FieldSecret, *d.PreviousSecret)
		if err != nil {
			return nil, err
		}
		secrets = append(secrets, previous)
	}
	return secrets, nil
}

// orderingWait reports whether an earlier delivery with the same ordering
// key to the same endpoint is unfinished, and how long to wait for it.
func (e *Engine) orderingWait(ctx context.Context, d *outboxtype.Delivery) (time.Duration, bool, error) {
	earlier, err := e.queries.OutboxDeliveryEarlierPending(ctx, dbsqlc.OutboxDeliveryEarlierPendingParams{
		EndpointID: d.EndpointID, OrderingKey: d.OrderingKey, Seq: d.Seq,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	wait := e.admission.Busy()
	if earlier.NextAttemptAt != nil {
		wait = max(wait, min(earlier.NextAttemptAt.Sub(e.now()), maxOrderingWait))
	}
	return wait, true, nil
}

// timeout is the request timeout of an attempt of d. An endpoint stored
// with a longer timeout than MaxEndpointTimeout allows (set before the
// limit was lowered) gets the limit: the job's own River timeout must
// never cut a request short.
func (e *Engine) timeout(d *outboxtype.Delivery) time.Duration {
	return min(d.Timeout, e.config.MaxEndpointTimeout)
}

// outcome is what an attempt learned, and whether River cancelled its job
// while it ran: the attempt is then the last.
type outcome struct {
	*egress.Outcome
	cancelled bool
}

// errorText describes a failed attempt without secrets, the URL (its query
// may hold a token) or the body.
func (o *outcome) errorText() string {
	text := o.Failure()
	if o.cancelled && text != "" {
		return reasonCancelled + "; the attempt: " + text
	}
	return text
}

// send sends d's delivery, attempt number attempt, in a span, signed with
// v's secrets and authorised with its auth. When the job's context ended
// while the request was in flight (and it did not succeed), it says so in
// the outcome: River cancelled the job remotely (the attempt is the last
// one), or the client is stopping (stopping: an attempt, since the
// receiver may have got it, which River counts too, but no verdict on the
// endpoint, nor on its circuit).
func (e *Engine) send(ctx context.Context, d *outboxtype.Delivery, attempt int, v *verdict) (out *outcome, stopping bool) {
	sendCtx, span := e.tracer.Start(telemetry.Parent(ctx, d.TraceContext), "wharf.outbox.deliver",
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("wharf.endpoint_id", d.EndpointID.String()),
			attribute.String("wharf.delivery_id", d.ID.String()),
			attribute.Int("wharf.attempt", attempt),
		))
	out = &outcome{Outcome: e.egress.Send(sendCtx, &egress.Request{
		EndpointID: d.EndpointID,
		URL:        d.URL,
		EventID:    d.EventID,
		Secrets:    v.secrets,
		Headers:    d.Headers,
		Auth:       v.auth,
		Body:       d.Payload,
		Timeout:    e.timeout(d),
	})}
	span.SetAttributes(attribute.String("wharf.outcome", out.Label()), attribute.Int("http.response.status_code", out.StatusCode))
	if !out.Succeeded() {
		span.SetStatus(codes.Error, out.Label())
	}
	span.End()
	if ctx.Err() != nil && !out.Succeeded() {
		switch {
		case errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely):
			out.cancelled = true
		case errors.Is(ctx.Err(), context.Canceled):
			out.MarkCutOff()
			stopping = true
		}
	}
	return out, stopping
}

// snooze ends a run without an attempt: River runs the job again after
// wait, and the run uses none of the delivery's attempts.
func (e *Engine) snooze(ctx context.Context, reason string, wait time.Duration) error {
	e.metrics.deferred.Add(ctx, 1, e.metrics.byReason.Of(reason))
	return river.JobSnooze(wait)
}

// deferOrFail ends a run that Admit did not admit: a *admission.Deferral
// snoozes the job, any other error is a database error (databaseError).
func (e *Engine) deferOrFail(ctx context.Context, log *slog.Logger, snoozes int, err error) error {
	var d *admission.Deferral
	if errors.As(err, &d) {
		return e.snooze(ctx, d.Reason, d.Wait)
	}
	return e.databaseError(ctx, log, snoozes, err)
}

// databaseError decides what a database error before the attempt (err
// says which statement's) means for the job. A transient one (connection
// lost, serialisation failure, server shutting down…) snoozes the job,
// which uses no attempt, for a short, growing, jittered wait; the job's
// context ending is returned as it is (River retries a stopping client's
// job, and Work handles a remote cancellation); any other error fails the
// run like an attempt.
func (e *Engine) databaseError(ctx context.Context, log *slog.Logger, snoozes int, err error) error {
	err = fmt.Errorf("outbox: %w", err)
	if ctx.Err() != nil || !transientDatabaseError(err) {
		return err
	}
	wait := e.admission.AfterDatabaseError(snoozes)
	log.WarnContext(ctx, "outbox: database error; snoozing without using an attempt",
		"error", err, "retry_in", wait)
	return e.snooze(ctx, deferDatabase, wait)
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
