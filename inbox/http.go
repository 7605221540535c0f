package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/wharfhq/wharf/internal/telemetry"
	"github.com/wharfhq/wharf/signature"
)

// DefaultReceiveTimeout bounds the database work of one HTTP delivery unless
// Config.ReceiveTimeout says otherwise.
const DefaultReceiveTimeout = 10 * time.Second

// Handler returns the HTTP handler for every configured source. It takes the
// source's name from the {source} path value when the route has one (e.g.
// mux.Handle("/webhooks/{source}", ib.Handler())), else from the last
// segment of the path.
//
// Each request is answered with a JSON body:
//
//	200 {"status":"accepted","event_id":…}                      first receipt, committed
//	200 {"status":"duplicate","event_id":…,"received_at":…}     seen before; nothing written
//	400 {"error":…}   body not JSON, unusable event id, unreadable body
//	401 {"error":…}   signature missing, malformed, stale or wrong
//	404 {"error":…}   unknown source
//	405 {"error":…}   not a POST
//	409 {"error":…}   id reused with another payload, when the source's OnMismatch is MismatchConflict
//	413 {"error":…}   body over the source's MaxBodyBytes
//	503 {"error":…}   database (or secret source) unavailable; nothing was written, retry
//
// Only a 200 means the event is durably stored; a sender retrying anything
// else loses nothing.
func (ib *Inbox) Handler() http.Handler {
	return http.HandlerFunc(ib.serveHTTP)
}

// SourceHandler returns the HTTP handler for the named source only,
// whatever the request path.
func (ib *Inbox) SourceHandler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ib.serveSource(w, r, name)
	})
}

func (ib *Inbox) serveHTTP(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("source")
	if name == "" {
		name = path.Base(r.URL.Path)
	}
	ib.serveSource(w, r, name)
}

func (ib *Inbox) serveSource(w http.ResponseWriter, r *http.Request, name string) {
	start := time.Now()
	ctx, span := ib.tracer.Start(telemetry.Extract(r.Context(), r.Header), "wharf.inbox.receive",
		trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	r = r.WithContext(ctx)
	a := &answer{w: w, source: UnknownSourceLabel}
	ib.answerSource(a, r, name)
	span.SetAttributes(attribute.String("wharf.source", a.source), attribute.String("wharf.result", a.result),
		attribute.Int("http.response.status_code", a.status))
	if a.status >= 500 {
		span.SetStatus(codes.Error, a.result)
	}
	ib.metrics.request(r.Context(), a.source, a.result, time.Since(start))
	switch a.result {
	case resultAccepted, resultDuplicate, resultIgnored, resultLate:
	default:
		ib.rejections.log(r.Context(), a.source, a.result, r.RemoteAddr, a.status)
	}
}

// answer is the response of one request with what the metrics record of
// it: the source label and the result.
type answer struct {
	w      http.ResponseWriter
	source string
	result string
	status int
}

func (a *answer) error(result string, status int, msg string) {
	a.result, a.status = result, status
	writeError(a.w, status, msg)
}

func (a *answer) json(result string, status int, v any) {
	a.result, a.status = result, status
	writeJSON(a.w, status, v)
}

func (ib *Inbox) answerSource(a *answer, r *http.Request, name string) {
	w := a.w
	src, ok := ib.sources[name]
	if ok {
		a.source = src.Name
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		a.error(resultMethod, http.StatusMethodNotAllowed, "only POST is accepted")
		return
	}
	if !ok {
		a.error(resultUnknownSource, http.StatusNotFound, "unknown source")
		return
	}
	log := ib.logger.With("source", src.Name)

	limit := src.MaxBodyBytes
	if r.ContentLength > limit {
		a.error(resultTooLarge, http.StatusRequestEntityTooLarge, "body exceeds the source's size limit")
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			a.error(resultTooLarge, http.StatusRequestEntityTooLarge, "body exceeds the source's size limit")
			return
		}
		a.error(resultMalformed, http.StatusBadRequest, "could not read body")
		return
	}

	verifyReq := &signature.Request{Method: r.Method, URL: requestURL(r), Header: r.Header, Body: raw}
	if err := src.Verifier.Verify(r.Context(), verifyReq); err != nil {
		if signature.ReceiverFault(err) {
			// Our configuration or secret store, not the sender: 503, so the
			// sender retries once it is fixed.
			msg := "inbox: no usable signing secret"
			if errors.Is(err, signature.ErrInvalidOptions) {
				msg = "inbox: invalid verifier options"
			}
			log.ErrorContext(r.Context(), msg, "error", err)
			a.error(resultUnavailable, http.StatusServiceUnavailable, "signature verification unavailable; retry later")
			return
		}
		log.DebugContext(r.Context(), "inbox: signature rejected", "error", err)
		a.error(resultBadSignature, http.StatusUnauthorized, signatureMessage(err))
		return
	}

	body := parseBody(raw)
	if !body.json && !src.AllowNonJSON {
		a.error(resultMalformed, http.StatusBadRequest, "body is not valid JSON")
		return
	}
	eventID, eventType, err := src.identify(r.Header, body)
	if err != nil {
		a.error(resultMalformed, http.StatusBadRequest, err.Error())
		return
	}
	log = log.With("event_id", eventID, "event_type", eventType)

	msg := Incoming{
		Source:      src.Name,
		EventID:     eventID,
		EventType:   eventType,
		Header:      r.Header,
		Body:        raw,
		PayloadHash: src.payloadHash(body),
		OrderingKey: src.orderingKey(r.Header, body),
		trace:       telemetry.StoredContext(r.Context()),
	}
	res, err := ib.receive(r.Context(), &msg)
	switch {
	case errors.Is(err, ErrInvalidMessage):
		a.error(resultMalformed, http.StatusBadRequest, err.Error())
		return
	case err != nil:
		log.ErrorContext(r.Context(), "inbox: receive failed; answered 503", "error", err)
		a.error(resultUnavailable, http.StatusServiceUnavailable, "storage unavailable; nothing was recorded, retry later")
		return
	}

	if res.Ignored {
		log.DebugContext(r.Context(), "inbox: event type ignored by its source; its key alone is kept")
		a.json(resultIgnored, http.StatusOK, map[string]any{"status": "ignored", "event_id": eventID})
		return
	}
	log = log.With("message_id", res.MessageID)
	if res.RedeliveryOf != uuid.Nil {
		log.InfoContext(r.Context(), "inbox: late arrival: the event was received before its dedupe key was pruned",
			"redelivery_of", res.RedeliveryOf, "policy", src.LateArrivals.String())
		status := "accepted"
		if src.LateArrivals == LateSkip {
			status = "duplicate" // stored processed: nothing will run
		}
		a.json(resultLate, http.StatusOK, map[string]any{"status": status, "event_id": eventID})
		return
	}
	if !res.Duplicate {
		log.DebugContext(r.Context(), "inbox: message accepted", "job_id", res.JobID)
		a.json(resultAccepted, http.StatusOK, map[string]any{"status": "accepted", "event_id": eventID})
		return
	}
	if res.PayloadMismatch {
		ib.metrics.mismatches.Add(r.Context(), 1, ib.metrics.bySource.Of(src.Name))
		log.WarnContext(r.Context(), "inbox: event id reused with a different payload; second payload ignored",
			"first_received_at", res.ReceivedAt)
		if src.OnMismatch == MismatchConflict {
			a.json(resultConflict, http.StatusConflict, map[string]any{
				"error":       "event id already received with a different payload",
				"event_id":    eventID,
				"received_at": res.ReceivedAt,
			})
			return
		}
	} else {
		log.DebugContext(r.Context(), "inbox: duplicate delivery", "first_received_at", res.ReceivedAt)
	}
	a.json(resultDuplicate, http.StatusOK, map[string]any{"status": "duplicate", "event_id": eventID, "received_at": res.ReceivedAt})
}

// signatureMessage turns a verification error into the 401 body: the
// package's own errors name the failed check (and never a secret); anything
// else from a custom verifier is summarised.
func signatureMessage(err error) string {
	for _, known := range []error{signature.ErrMissingHeader, signature.ErrMalformedHeader, signature.ErrStaleTimestamp, signature.ErrNoMatch} {
		if errors.Is(err, known) {
			return err.Error()
		}
	}
	return "invalid signature"
}

// requestURL rebuilds the absolute URL of r (scheme from TLS or
// X-Forwarded-Proto, the Host header, path and query) for verifiers that
// sign the URL. Behind a proxy that rewrites hosts or paths, give the
// verifier signature.Options.PublicBaseURL instead.
func requestURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	return scheme + "://" + r.Host + r.URL.RequestURI()
}

// receive receives msg in the HTTP handler's group commit (see
// receive.Receiver.Receive): an error wraps ErrInvalidMessage for a
// message that cannot be stored as given.
func (ib *Inbox) receive(ctx context.Context, msg *Incoming) (Result, error) {
	m, err := ib.toReceive(msg)
	if err != nil {
		return Result{}, err
	}
	res, err := ib.receiver.Receive(ctx, m)
	return resultOf(res), err
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
