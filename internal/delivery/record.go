package delivery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/egress"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/shared"
)

// settled is where an attempt left its delivery.
type settled struct {
	// status is the delivery's new status; empty when the attempt was not
	// recorded, the delivery being no longer its to record.
	status string
	// wait is how long after now the next attempt is due (retrying).
	wait time.Duration
	// endpointVersion is the endpoint's version as the attempt was
	// recorded: a batch job that finds it changed hands the rest over.
	endpointVersion int64
}

// settle records attempt number attempt (of limit) of d, which held slot
// (admission.NoSlot: none), updates endpoint health and says where it
// left the delivery. An error means the attempt could not be
// recorded, nor its slot freed; otherwise the record freed the slot.
func (e *Engine) settle(ctx context.Context, log *slog.Logger, attempt, limit int,
	d *outboxtype.Delivery, slot int32, attemptedAt time.Time, out *outcome,
) (settled, error) {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()

	rec := &attemptRecord{row: d, slot: slot, attemptedAt: attemptedAt, out: out, status: outboxtype.StatusSucceeded}
	// The SSRF guard's refusal is no transient failure: the address is
	// refused on every try, so the delivery is dead at once. A request the
	// client's stop cut off is recorded, but says nothing of the endpoint:
	// it never makes its delivery dead, and the attempt is made again as
	// soon as a worker can (without using up the attempt: see finish and
	// the batch's hand-over).
	final := (attempt >= limit && !out.CutOff) || out.Gone() || out.cancelled || out.Refused()
	var wait time.Duration
	if !out.Succeeded() {
		rec.status = outboxtype.StatusRetrying
		switch {
		case final:
			rec.status = outboxtype.StatusDead
		case out.CutOff:
			next := attemptedAt.Add(out.Duration)
			rec.nextAttemptAt = &next
		default:
			wait = e.retries.wait(attempt, out.Outcome)
			next := attemptedAt.Add(out.Duration + wait)
			rec.nextAttemptAt = &next
		}
	}
	changed, err := e.record(ctx, rec)
	e.metrics.attempt(ctx, out.Outcome, d.EventCreatedAt, err == nil && rec.status == outboxtype.StatusDead)
	if errors.Is(err, pgx.ErrNoRows) {
		// The delivery is no longer this job's to record: its endpoint was
		// deleted, a replay took it over, or it finished meanwhile.
		log.InfoContext(ctx, "outbox: attempt not recorded; the delivery was deleted, replayed or finished meanwhile",
			"status_code", out.StatusCode)
		return settled{}, nil
	}
	if err != nil {
		return settled{}, fmt.Errorf("outbox: delivery %s: %w", d.ID, err)
	}

	attrs := []any{"status_code", out.StatusCode, "duration", out.Duration}
	if changed.disabledReason != "" {
		log.WarnContext(ctx, "outbox: endpoint disabled", append(attrs, "reason", changed.disabledReason)...)
		if e.config.OnEndpointDisabled != nil {
			e.hook(ctx, "OnEndpointDisabled", func() {
				e.config.OnEndpointDisabled(ctx, Disabled{EndpointID: d.EndpointID, Reason: changed.disabledReason})
			})
		}
	}
	e.circuitChanged(ctx, log, d, changed)
	if changed.disabledReason != "" || changed.circuitOpened || changed.circuitClosed || rec.status == outboxtype.StatusDead {
		e.notice(ctx)
	}
	if rec.status == outboxtype.StatusDead {
		e.onDead(ctx, Dead{DeliveryID: d.ID, EndpointID: d.EndpointID, EventID: d.EventID, Reason: out.errorText()})
	}
	switch rec.status {
	case outboxtype.StatusSucceeded:
		log.DebugContext(ctx, "outbox: delivered", attrs...)
	case outboxtype.StatusDead:
		log.WarnContext(ctx, "outbox: delivery dead-lettered", append(attrs, "error", out.errorText())...)
	default:
		log.InfoContext(ctx, "outbox: attempt failed; will retry", append(attrs, "error", out.errorText(), "retry_in", wait)...)
	}
	return settled{status: rec.status, wait: wait, endpointVersion: changed.endpointVersion}, nil
}

// attempt records one attempt and, when it delivered, the event's latency.
func (m *metrics) attempt(ctx context.Context, out *egress.Outcome, publishedAt time.Time, dead bool) {
	m.attempts.Add(ctx, 1, m.byOutcome.Of(out.Label()))
	m.duration.Record(ctx, out.Duration.Seconds())
	if out.Succeeded() {
		m.latency.Record(ctx, time.Since(publishedAt).Seconds())
	}
	if dead {
		m.dead.Add(ctx, 1)
	}
}

// Reasons recorded when an attempt disables its endpoint.
const (
	reasonGone    = "endpoint answered 410 Gone"
	reasonFailing = "every attempt failed for longer than the disable-after period"
)

// attemptRecord is an attempt's outcome and the delivery state it leads to.
type attemptRecord struct {
	row           *outboxtype.Delivery
	slot          int32
	attemptedAt   time.Time
	out           *outcome
	status        string // the delivery's new status
	nextAttemptAt *time.Time
}

// recorded is what recording an attempt changed on its endpoint.
type recorded struct {
	// disabledReason is why the attempt disabled the endpoint; empty when
	// it did not.
	disabledReason string
	// circuitOpened is true when the attempt opened the endpoint's circuit,
	// for the circuitOpenings-th time since it was last closed.
	circuitOpened   bool
	circuitOpenings int
	// circuitClosed is true when the attempt, a success, closed it.
	circuitClosed bool
	// endpointVersion is the endpoint's version as the attempt was
	// recorded, before any change the attempt itself made.
	endpointVersion int64
}

// record stores an attempt, the delivery's new state and the
// endpoint's health and circuit, and frees the attempt's lease, all in one
// statement (one round trip, atomic). It reports whether the attempt
// disabled the endpoint (it answered 410 Gone, or it has failed for
// Config.DisableAfter) and opened or closed its circuit. An error where
// errors.Is(err, pgx.ErrNoRows) is true means the delivery is no longer the
// attempt's to record: it no longer exists, a replay moved it to a newer
// generation, or it is finished.
//
// It locks the endpoint's row first, then the delivery's, then the
// lease's: the order EndpointDelete locks them in.
func (e *Engine) record(ctx context.Context, rec *attemptRecord) (*recorded, error) {
	if err := e.partitions.Ensure(ctx, nil, "wharf_outbox_attempts", rec.attemptedAt); err != nil {
		return nil, err
	}
	params, err := e.attemptParams(rec)
	if err != nil {
		return nil, err
	}
	// With the attempts of the node that finish at the same time, in one
	// transaction.
	res, err := e.records.Do(ctx, params.EndpointID, params)
	if err != nil {
		return nil, err
	}
	out := &recorded{circuitOpened: res.CircuitOpened, circuitOpenings: int(res.CircuitOpenings), circuitClosed: res.CircuitClosed,
		endpointVersion: res.EndpointVersion}
	if res.DisabledNow {
		out.disabledReason = res.DisabledReason
	}
	return out, nil
}

// attemptParams are the parameters of OutboxAttemptRecord for rec.
func (e *Engine) attemptParams(rec *attemptRecord) (*dbsqlc.OutboxAttemptRecordParams, error) {
	attemptID, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	var statusCode *int32
	if rec.out.StatusCode != 0 {
		code := int32(rec.out.StatusCode)
		statusCode = &code
	}
	now := e.now()
	var disableBefore *time.Time
	if e.config.DisableAfter > 0 {
		before := now.Add(-e.config.DisableAfter)
		disableBefore = &before
	}
	return &dbsqlc.OutboxAttemptRecordParams{
		Now:                now,
		AttemptID:          attemptID,
		AttemptedAt:        rec.attemptedAt,
		Succeeded:          rec.out.Succeeded(),
		StatusCode:         statusCode,
		ResponseBody:       append([]byte{}, rec.out.Body...), // never NULL
		ResponseTruncated:  rec.out.Truncated,
		Error:              shared.Text(rec.out.errorText(), 2048),
		DurationUs:         rec.out.Duration.Microseconds(),
		DeliveryID:         rec.row.ID,
		Generation:         rec.row.Generation,
		EndpointID:         rec.row.EndpointID,
		LeaseSlot:          rec.slot,
		Gone:               rec.out.Gone(),
		Verdict:            !rec.out.CutOff,
		DisableBefore:      disableBefore,
		GoneReason:         reasonGone,
		FailingReason:      reasonFailing,
		CircuitThreshold:   int32(max(e.config.CircuitBreakerThreshold, 0)),
		CooldownSeconds:    e.config.CircuitBreakerCooldown.Seconds(),
		MaxCooldownSeconds: e.config.CircuitBreakerMaxCooldown.Seconds(),
		StaleBefore:        now.Add(-time.Second),
		DeliveryStatus:     string(rec.status),
		NextAttemptAt:      rec.nextAttemptAt,
	}, nil
}

// circuitChanged logs and counts an attempt's change of its endpoint's
// circuit.
func (e *Engine) circuitChanged(ctx context.Context, log *slog.Logger, d *outboxtype.Delivery, changed *recorded) {
	switch {
	case changed.circuitOpened:
		e.metrics.openings.Add(ctx, 1, e.metrics.byEndpoint.Of(d.EndpointID.String()))
		log.WarnContext(ctx, "outbox: circuit opened; the endpoint's deliveries wait without using attempts",
			"openings", changed.circuitOpenings, "cooldown", e.admission.Cooldown(changed.circuitOpenings))
	case changed.circuitClosed:
		log.InfoContext(ctx, "outbox: circuit closed")
	}
}

// markedDead counts a delivery a worker dead-lettered without an attempt
// and calls Config.OnDead for it.
func (e *Engine) markedDead(ctx context.Context, dead dbsqlc.OutboxDeliveryMarkDeadRow, reason string) {
	e.metrics.dead.Add(ctx, 1)
	e.notice(ctx)
	e.onDead(ctx, Dead{DeliveryID: dead.ID, EndpointID: dead.EndpointID, EventID: outboxtype.FormatEventID(dead.EventID), Reason: reason})
}

// notice calls Config.OnNotice, if set.
func (e *Engine) notice(ctx context.Context) {
	if e.config.OnNotice != nil {
		e.config.OnNotice(ctx)
	}
}

// onDead calls Config.OnDead, if set, with d.
func (e *Engine) onDead(ctx context.Context, d Dead) {
	if e.config.OnDead == nil {
		return
	}
	e.hook(ctx, "OnDead", func() { e.config.OnDead(ctx, d) })
}

// hook runs an application callback, recovering a panic.
func (e *Engine) hook(ctx context.Context, name string, fn func()) {
	defer func() {
		if r := recover(); r != nil {
			e.config.Logger.ErrorContext(ctx, "outbox: "+name+" panicked", "panic", fmt.Sprint(r))
		}
	}()
	fn()
}

// recordMany records attempts in pipelined transactions, one per endpoint
// (the group commit gives it one endpoint's attempts; a mixed call is split),
// each sorted by lease slot, then delivery: every statement that locks
// more than one of an endpoint's slots (OutboxLeaseAcquireCounted) locks
// them in slot order. Should a transaction fail, each of its attempts is
// recorded on its own, so that one attempt's failure is only its own.
// Every transaction gets recordTimeout of its own.
func (e *Engine) recordMany(ctx context.Context, params []*dbsqlc.OutboxAttemptRecordParams) ([]*dbsqlc.OutboxAttemptRecordRow, []error) {
	ctx = context.WithoutCancel(ctx)
	outs := make([]*dbsqlc.OutboxAttemptRecordRow, len(params))
	errs := make([]error, len(params))
	order := make([]int, len(params))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		pa, pb := params[a], params[b]
		return cmp.Or(slices.Compare(pa.EndpointID[:], pb.EndpointID[:]),
			cmp.Compare(pa.LeaseSlot, pb.LeaseSlot), slices.Compare(pa.DeliveryID[:], pb.DeliveryID[:]))
	})
	for len(order) > 0 {
		n := 1
		for n < len(order) && params[order[n]].EndpointID == params[order[0]].EndpointID {
			n++
		}
		group := order[:n]
		order = order[n:]
		var failed error
		if allSucceeded(params, group) {
			failed = e.recordSucceeded(ctx, params, group, outs, errs)
		} else {
			failed = e.recordBatch(ctx, params, group, outs, errs)
		}
		if failed == nil {
			continue
		}
		if len(group) == 1 {
			errs[group[0]] = failed
			continue
		}
		// The transaction rolled back: nothing of it was recorded.
		for _, i := range group {
			outs[i], errs[i] = nil, nil
			if err := e.recordBatch(ctx, params, []int{i}, outs, errs); err != nil {
				errs[i] = err
			}
		}
	}
	return outs, errs
}

// recordBatch runs the records params[i] for i in order in one pipelined
// transaction, setting outs[i] and errs[i] (pgx.ErrNoRows: the delivery was
// not the attempt's to record). It returns an error when the transaction
// failed, which then recorded nothing.
func (e *Engine) recordBatch(ctx context.Context, params []*dbsqlc.OutboxAttemptRecordParams, order []int,
	outs []*dbsqlc.OutboxAttemptRecordRow, errs []error,
) error {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	batch := make([]dbsqlc.OutboxAttemptRecordParams, len(order))
	for k, i := range order {
		batch[k] = *params[i]
	}
	results := e.queries.OutboxAttemptRecord(ctx, batch)
	var failed error
	results.QueryRow(func(k int, row dbsqlc.OutboxAttemptRecordRow, err error) {
		i := order[k]
		switch {
		case err == nil:
			outs[i] = &row
		case errors.Is(err, pgx.ErrNoRows):
			errs[i] = err
		default:
			failed = cmp.Or(failed, err)
		}
	})
	// Closing again returns how the transaction ended: whether it committed.
	if err := results.Close(); err != nil {
		failed = cmp.Or(failed, err)
	}
	if failed != nil {
		return fmt.Errorf("record attempt: %w", failed)
	}
	return nil
}

// allSucceeded reports whether the attempts params[i], i in group, are
// successes of distinct deliveries, more than one: what
// OutboxAttemptRecordSucceeded records in one statement.
func allSucceeded(params []*dbsqlc.OutboxAttemptRecordParams, group []int) bool {
	if len(group) < 2 {
		return false
	}
	seen := make(map[uuid.UUID]bool, len(group))
	for _, i := range group {
		p := params[i]
		if !p.Succeeded || p.Gone || p.Error != "" || p.StatusCode == nil || seen[p.DeliveryID] {
			return false
		}
		seen[p.DeliveryID] = true
	}
	return true
}

// recordSucceeded records the successful attempts params[i], i in group,
// all of one endpoint, in one statement, setting outs[i] and errs[i]
// (pgx.ErrNoRows: the delivery was not the attempt's to record) as
// recordBatch does. It returns an error when the statement failed, which
// then recorded nothing.
func (e *Engine) recordSucceeded(ctx context.Context, params []*dbsqlc.OutboxAttemptRecordParams, group []int,
	outs []*dbsqlc.OutboxAttemptRecordRow, errs []error,
) error {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	rows, err := e.queries.OutboxAttemptRecordSucceeded(ctx, succeededArg(params, group))
	if err != nil {
		return fmt.Errorf("record attempts: %w", err)
	}
	byID := make(map[uuid.UUID]dbsqlc.OutboxAttemptRecordSucceededRow, len(rows))
	for _, r := range rows {
		byID[r.DeliveryID] = r
	}
	for _, i := range group {
		r, ok := byID[params[i].DeliveryID]
		if !ok {
			errs[i] = pgx.ErrNoRows
			continue
		}
		outs[i] = &dbsqlc.OutboxAttemptRecordRow{Attempts: r.Attempts, CircuitClosed: r.CircuitClosed, EndpointVersion: r.EndpointVersion}
	}
	return nil
}

// succeededArg is OutboxAttemptRecordSucceeded's argument for the
// attempts params[i], i in group (see recordSucceeded).
func succeededArg(params []*dbsqlc.OutboxAttemptRecordParams, group []int) dbsqlc.OutboxAttemptRecordSucceededParams {
	arg := dbsqlc.OutboxAttemptRecordSucceededParams{EndpointID: params[group[0]].EndpointID}
	for _, i := range group {
		p := params[i]
		arg.DeliveryIds = append(arg.DeliveryIds, p.DeliveryID.String())
		arg.Generations = append(arg.Generations, p.Generation)
		arg.AttemptIds = append(arg.AttemptIds, p.AttemptID.String())
		arg.AttemptedAts = append(arg.AttemptedAts, p.AttemptedAt)
		arg.StatusCodes = append(arg.StatusCodes, *p.StatusCode)
		arg.ResponseBodies = append(arg.ResponseBodies, p.ResponseBody)
		arg.ResponseTruncated = append(arg.ResponseTruncated, p.ResponseTruncated)
		arg.DurationsUs = append(arg.DurationsUs, p.DurationUs)
		arg.LeaseSlots = append(arg.LeaseSlots, p.LeaseSlot)
		arg.Nows = append(arg.Nows, p.Now)
		if p.Now.After(arg.Now) {
			arg.Now, arg.StaleBefore = p.Now, p.StaleBefore
		}
	}
	return arg
}
