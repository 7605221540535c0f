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
	"github.com/wharfhq/wharf/internal/telemetry"
)

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
