package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/wharfhq/wharf/internal/telemetry"
)

// maxScopeLength bounds Route's and the principal's results, in bytes.
const maxScopeLength = 512

// finishTimeout bounds the statements that settle a request after its
// handler returned. They run even when the request's context is cancelled:
// once the handler has finished, recording its outcome is what makes a
// retry safe.
const finishTimeout = 10 * time.Second

// Middleware makes the application's mutating endpoints idempotent under the
// Idempotency-Key header. It is safe for concurrent use; create it once with
// New and wrap any number of handlers.
type Middleware struct {
	pool      *pgxpool.Pool
	principal PrincipalFunc
	conf      Config
	methods   map[string]bool
	// routeFromPath is set when Config.Route is the default, which may
	// fall back on the client's path.
	routeFromPath bool
	requests      metric.Int64Counter
	byOutcome     *telemetry.Attrs
}

// New returns a Middleware storing keys through pool, in the table created
// by wharf.Migrate. principal scopes keys (see PrincipalFunc) and is
// required; config may be nil for the defaults. It returns an error where
// errors.Is(err, ErrInvalidConfig) is true when an argument is missing or
// Config fields are invalid (every problem listed).
func New(pool *pgxpool.Pool, principal PrincipalFunc, config *Config) (*Middleware, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: pool is nil", ErrInvalidConfig)
	}
	if principal == nil {
		return nil, fmt.Errorf("%w: principal is nil; keys must be scoped per principal", ErrInvalidConfig)
	}
	conf, err := config.resolve()
	if err != nil {
		return nil, err
	}
	methods := make(map[string]bool, len(conf.Methods))
	for _, method := range conf.Methods {
		methods[method] = true
	}
	requests, err := telemetry.Meter(conf.MeterProvider, "idempotency").Int64Counter("wharf_idempotency_requests",
		metric.WithDescription("Requests with an Idempotency-Key by outcome: new, replayed, in_progress, conflict."))
	if err != nil {
		return nil, fmt.Errorf("idempotency: metrics: %w", err)
	}
	return &Middleware{
		pool:          pool,
		principal:     principal,
		conf:          conf,
		methods:       methods,
		routeFromPath: config == nil || config.Route == nil,
		requests:      requests,
		byOutcome:     telemetry.NewAttrs("outcome"),
	}, nil
}

// Wrap returns a handler that applies the middleware before next.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !m.methods[r.Method] {
		next.ServeHTTP(w, r)
		return
	}
	key, err := parseKey(r.Header)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if key == "" {
		switch {
		case m.conf.RequireKey:
			writeError(w, http.StatusBadRequest, msgKeyRequired)
		case m.conf.Transactional:
			m.serveTx(w, r, next, nil)
		default:
			next.ServeHTTP(w, r)
		}
		return
	}
	req, status, msg := m.prepare(r, key)
	if req == nil {
		writeError(w, status, msg)
		return
	}
	if m.conf.Transactional {
		m.serveTx(w, r, next, req)
	} else {
		m.serveAlone(w, r, next, req)
	}
}

// prepare reads the body of r (replacing it for the handler), scopes and
// fingerprints the request. When it cannot, it returns a nil request and the
// status and message to answer with.
func (m *Middleware) prepare(r *http.Request, key string) (*keyedRequest, int, string) {
	body, status, msg := m.readBody(r)
	if status != 0 {
		return nil, status, msg
	}
	reset := func() { r.Body = io.NopCloser(bytes.NewReader(body)) }
	reset()

	route := m.conf.Route(r)
	if err := checkScope(route); err != nil {
		if m.routeFromPath && r.Pattern == "" {
			// The client's path, not the application, is at fault.
			status := http.StatusBadRequest
			if len(route) > maxScopeLength {
				status = http.StatusRequestURITooLong
			}
			return nil, status, "idempotency: the request path cannot scope an Idempotency-Key: " + err.Error()
		}
		m.conf.Logger.ErrorContext(r.Context(), "idempotency: bad route name", "error", err)
		return nil, http.StatusInternalServerError, msgBadScope
	}
	principal := m.principal(r)
	reset() // whatever the principal function read
	if principal == "" {
		return nil, http.StatusUnauthorized, msgNoPrincipal
	}
	if err := checkScope(principal); err != nil {
		m.conf.Logger.ErrorContext(r.Context(), "idempotency: bad principal", "route", route, "error", err)
		return nil, http.StatusInternalServerError, msgBadScope
	}
	return &keyedRequest{
		route:       route,
		principal:   principal,
		key:         key,
		fingerprint: fingerprint(r.Method, r.URL.RequestURI(), body),
		claimID:     uuid.New(),
	}, 0, ""
}

// readBody reads r's body up to MaxRequestBody. On failure it returns the
// status and message to answer with.
func (m *Middleware) readBody(r *http.Request) ([]byte, int, string) {
	if r.Body == nil || r.Body == http.NoBody {
		return []byte{}, 0, ""
	}
	limit := m.conf.MaxRequestBody
	var src io.Reader = r.Body
	if limit >= 0 {
		src = io.LimitReader(r.Body, limit+1)
	}
	body, err := io.ReadAll(src)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge) || (limit >= 0 && int64(len(body)) > limit):
		return nil, http.StatusRequestEntityTooLarge, fmt.Sprintf("idempotency: request body larger than %d bytes", m.bodyLimit(tooLarge))
	case err != nil:
		return nil, http.StatusBadRequest, "idempotency: reading the request body: " + err.Error()
	}
	return body, 0, ""
}

// bodyLimit names the limit a too-large body broke: the application's own
// http.MaxBytesReader's when that was the one.
func (m *Middleware) bodyLimit(tooLarge *http.MaxBytesError) int64 {
	if tooLarge != nil {
		return tooLarge.Limit
	}
	return m.conf.MaxRequestBody
}

// checkScope reports why s cannot be stored as a route or principal.
func checkScope(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > maxScopeLength:
		return fmt.Errorf("%d bytes, more than %d", len(s), maxScopeLength)
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	case bytes.IndexByte([]byte(s), 0) >= 0:
		return errors.New("contains NUL")
	}
	return nil
}

// serveAlone handles a keyed request in non-transactional mode: the claim
// commits before the handler runs, the outcome is recorded after it, or as
// soon as its response outgrows the buffer.
func (m *Middleware) serveAlone(w http.ResponseWriter, r *http.Request, next http.Handler, req *keyedRequest) {
	ctx := r.Context()
	v, row, err := m.claimAlone(ctx, req)
	if err != nil {
		m.conf.Logger.ErrorContext(ctx, "idempotency: claim failed", "route", req.route, "key", req.key, "error", err)
		writeError(w, http.StatusServiceUnavailable, msgUnavailable)
		return
	}
	if m.answer(r.Context(), w, v, row) {
		return
	}

	var rec *recorder
	settled := false
	settle := func() {
		settled = true
		m.settleAlone(ctx, req, rec)
	}
	rec = newRecorder(m.conf.MaxBufferedResponseBody, func() http.ResponseWriter {
		// Past the buffer: the status and headers are final, so the
		// outcome is recorded now, before the client sees any of it,
		// and the response then streams.
		settle()
		rec.sendTo(w)
		return w
	})
	defer func() {
		if !settled { // the handler panicked; the panic goes on up
			m.release(ctx, req)
		}
	}()
	next.ServeHTTP(rec, r)
	if rec.streaming() {
		return
	}
	settle()
	rec.sendTo(w)
}

// settleAlone records a non-transactional handler's outcome: it completes
// req's key with rec's response, or releases the key when the response is
// not one to store.
func (m *Middleware) settleAlone(ctx context.Context, req *keyedRequest, rec *recorder) {
	if !storable(rec.finish()) {
		m.release(ctx, req)
		return
	}
	fctx, cancel := finishContext(ctx)
	defer cancel()
	kept, err := m.completeRetrying(fctx, req, rec)
	switch {
	case err != nil:
		// The handler's effects happened and cannot be undone here; its
		// answer is the truth, so it is sent all the same. The key stays
		// in progress: retries get 409 until InProgressTimeout has passed
		// since the claim, and then a retry takes the key over and runs the
		// handler again — a second effect, which is why completeRetrying
		// tries more than once and why transactional mode exists.
		m.conf.Logger.ErrorContext(ctx, "idempotency: response not recorded; the key stays in progress until InProgressTimeout, after which a retry runs the handler again",
			"route", req.route, "key", req.key, "error", err)
	case !kept:
		m.conf.Logger.WarnContext(ctx, "idempotency: claim lost while the handler ran (it outlived InProgressTimeout); response not recorded",
			"route", req.route, "key", req.key)
	}
}

// serveTx handles a request in transactional mode. req is nil for a request
// without a key, which runs in a transaction with nothing recorded.
//
// One transaction holds everything: the advisory lock on the key, the
// in_progress claim, the handler's writes (in a savepoint) and the completed
// key. It commits only when the handler answered below 500; otherwise, and
// whenever the process or its connection dies first, Postgres rolls all of
// it back and the key is free again at once.
func (m *Middleware) serveTx(w http.ResponseWriter, r *http.Request, next http.Handler, req *keyedRequest) {
	ctx := r.Context()
	logArgs := []any{}
	if req != nil {
		logArgs = append(logArgs, "route", req.route, "key", req.key)
	}
	tx, err := m.pool.Begin(ctx)
	if err != nil {
		m.conf.Logger.ErrorContext(ctx, "idempotency: begin failed", append(logArgs, "error", err)...)
		writeError(w, http.StatusServiceUnavailable, msgUnavailable)
		return
	}
	committed := false
	defer func() { // also on panic, which then goes on up
		if committed {
			return
		}
		fctx, cancel := finishContext(ctx)
		defer cancel()
		if err := tx.Rollback(fctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
			// The connection is closed on a failed rollback, which ends the
			// transaction on the server all the same.
			m.conf.Logger.WarnContext(ctx, "idempotency: rollback failed", append(logArgs, "error", err)...)
		}
	}()

	if req != nil {
		v, row, err := m.claim(ctx, tx, req)
		if err != nil {
			m.conf.Logger.ErrorContext(ctx, "idempotency: claim failed", append(logArgs, "error", err)...)
			writeError(w, http.StatusServiceUnavailable, msgUnavailable)
			return
		}
		if m.answer(r.Context(), w, v, row) {
			return
		}
	}
	handlerTx, err := tx.Begin(ctx)
	if err != nil {
		m.conf.Logger.ErrorContext(ctx, "idempotency: savepoint failed", append(logArgs, "error", err)...)
		writeError(w, http.StatusServiceUnavailable, msgUnavailable)
		return
	}

	// Nothing may reach the client before the commit, so a response too
	// large to buffer cannot be sent: it is refused, and the handler's
	// writes roll back.
	rec := newRecorder(m.conf.MaxBufferedResponseBody, nil)
	next.ServeHTTP(rec, r.WithContext(withTx(ctx, handlerTx)))

	if rec.overflowed {
		m.conf.Logger.ErrorContext(ctx, "idempotency: response body larger than MaxBufferedResponseBody; rolled back",
			append(logArgs, "status", rec.status, "limit", m.conf.MaxBufferedResponseBody)...)
		writeError(w, http.StatusInternalServerError, msgTooLarge)
		return
	}
	if !storable(rec.finish()) {
		rec.sendTo(w) // the deferred rollback undoes the handler's writes and releases the key
		return
	}
	fctx, cancel := finishContext(ctx)
	defer cancel()
	if tx.Conn().PgConn().TxStatus() == 'E' {
		m.conf.Logger.ErrorContext(ctx, "idempotency: handler answered below 500 but left its transaction failed; rolled back",
			append(logArgs, "status", rec.status)...)
		writeError(w, http.StatusInternalServerError, msgHandlerTx)
		return
	}
	// Keep the handler's writes, unless it committed or rolled back its
	// savepoint itself (then it is closed).
	if err := handlerTx.Commit(fctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		m.conf.Logger.ErrorContext(ctx, "idempotency: releasing the handler's savepoint failed", append(logArgs, "error", err)...)
		writeError(w, http.StatusInternalServerError, msgHandlerTx)
		return
	}
	if req != nil {
		kept, err := m.complete(fctx, tx, req, rec)
		if err == nil && !kept {
			err = errors.New("claim vanished inside its own transaction")
		}
		if err != nil {
			m.conf.Logger.ErrorContext(ctx, "idempotency: recording the response failed; rolled back", append(logArgs, "error", err)...)
			writeError(w, http.StatusServiceUnavailable, msgNotCommitted)
			return
		}
	}
	if err := tx.Commit(fctx); err != nil {
		m.conf.Logger.ErrorContext(ctx, "idempotency: commit failed", append(logArgs, "error", err)...)
		writeError(w, http.StatusServiceUnavailable, msgNotCommitted)
		return
	}
	committed = true
	rec.sendTo(w)
}

// storable reports whether a response with status is recorded for replay.
// 5xx and the transient 4xx answers — 408 Request Timeout, 425 Too Early,
// 429 Too Many Requests — say "not now" rather than decide the request: a
// client is expected to retry them, so the key is released (and, in
// transactional mode, the handler's writes roll back) for the retry to run
// the handler again, where a stored answer would repeat "not now" for as
// long as the key is kept.
func storable(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status < http.StatusInternalServerError
}

// finishContext returns a context for settling a request that outlives the
// request's cancellation but not finishTimeout.
func finishContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
}
