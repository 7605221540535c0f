package idempotency

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// ErrResponseTooLarge is returned by the ResponseWriter a transactional
// Middleware gives the handler when the response body would grow past
// Config.MaxBufferedResponseBody: nothing more is taken, and the middleware
// answers 500 and rolls the handler's writes back once the handler returns.
var ErrResponseTooLarge = errors.New("idempotency: response body larger than Config.MaxBufferedResponseBody")

// recorder buffers a handler's response, up to limit bytes of body. Nothing
// reaches the client until the outcome is recorded: a client must never see
// a success that a retry would not replay.
//
// A body that would grow past limit calls overflow once, before the write
// that crosses it. overflow settles the outcome and returns where the
// response goes from then on (the client: it has been sent the status, the
// headers and the body so far), or nil to refuse the rest, which Write then
// does with ErrResponseTooLarge.
//
// Handlers that stream (http.Flusher) are not supported: flushing is not
// offered, and the response is sent once the handler returns (or, past
// limit, as overflow decides).
type recorder struct {
	header http.Header
	sent   http.Header // header as it was when the status was written
	status int
	body   []byte
	size   int64 // body bytes the handler wrote, including any not buffered
	limit  int64 // most body bytes buffered; -1 none

	overflow   func() http.ResponseWriter
	overflowed bool
	stream     http.ResponseWriter // where the body goes after overflow, when anywhere
}

func newRecorder(limit int64, overflow func() http.ResponseWriter) *recorder {
	return &recorder{header: http.Header{}, limit: limit, overflow: overflow}
}

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(code int) {
	// The same check, and panic, as net/http's.
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	// Informational (1xx) responses are dropped: only the final one is sent.
	if rec.status != 0 || code < 200 {
		return
	}
	rec.status = code
	rec.sent = rec.header.Clone()
}

func (rec *recorder) Write(p []byte) (int, error) {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	switch {
	case rec.stream != nil:
		return rec.streamed(p)
	case rec.overflowed:
		return 0, ErrResponseTooLarge
	case rec.limit < 0 || rec.size+int64(len(p)) <= rec.limit:
		rec.buffer(p)
		rec.size += int64(len(p))
		return len(p), nil
	}
	rec.overflowed = true
	if rec.overflow != nil {
		rec.stream = rec.overflow()
	}
	rec.body = nil // sent, or never to be: either way not held
	if rec.stream == nil {
		return 0, ErrResponseTooLarge
	}
	return rec.streamed(p)
}

func (rec *recorder) streamed(p []byte) (int, error) {
	n, err := rec.stream.Write(p)
	rec.size += int64(n)
	return n, err
}

// buffer appends p to the body, which it grows as append does but never
// beyond limit: memory held per request stays within limit.
func (rec *recorder) buffer(p []byte) {
	if need := len(rec.body) + len(p); need > cap(rec.body) && rec.limit >= 0 {
		grown := make([]byte, len(rec.body), min(max(2*cap(rec.body), need, 512), int(rec.limit)))
		copy(grown, rec.body)
		rec.body = grown
	}
	rec.body = append(rec.body, p...)
}

// finish settles the status of a handler that wrote nothing (200, as
// net/http does) and returns it.
func (rec *recorder) finish() int {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	return rec.status
}

// streaming reports whether the response went to the client as the handler
// wrote it, past limit: it has been sent already.
func (rec *recorder) streaming() bool { return rec.stream != nil }

// sendTo writes the buffered response to w.
func (rec *recorder) sendTo(w http.ResponseWriter) {
	status := rec.finish()
	dst := w.Header()
	for name, values := range rec.sent {
		dst[name] = values
	}
	w.WriteHeader(status)
	_, _ = w.Write(rec.body)
}

// storedHeaders returns the headers of names that the response carries, as
// the JSON stored with it.
func (rec *recorder) storedHeaders(names []string) ([]byte, error) {
	kept := make(map[string][]string, len(names))
	for _, name := range names {
		if values := rec.sent[name]; len(values) > 0 {
			kept[name] = values
		}
	}
	return json.Marshal(kept)
}

// The messages of the middleware's own answers. Each is sent as
// {"error": message}.
const (
	msgKeyRequired  = "idempotency: the Idempotency-Key header is required"
	msgInProgress   = "idempotency: a request with this Idempotency-Key is still in progress; retry later"
	msgMismatch     = "idempotency: this Idempotency-Key was already used for a different request (method, path or body); use a new key for a new request"
	msgNoPrincipal  = "idempotency: the request has no principal to scope its Idempotency-Key to"
	msgUnavailable  = "idempotency: the database is unavailable; nothing was recorded, retry with the same Idempotency-Key"
	msgNotCommitted = "idempotency: the outcome could not be committed; retry with the same Idempotency-Key"
	msgHandlerTx    = "idempotency: the handler left its transaction failed; nothing was recorded"
	msgBadScope     = "idempotency: cannot scope the Idempotency-Key (see the server log)"
	msgCorrupt      = "idempotency: the stored response for this Idempotency-Key is unreadable"
	msgTooLarge     = "idempotency: the response was larger than the middleware buffers (Config.MaxBufferedResponseBody); nothing was committed"
)

// writeError answers status with the JSON body {"error": msg}.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
	}{msg})
}

// writeInProgress answers 409 with Retry-After.
func writeInProgress(w http.ResponseWriter, retryAfter time.Duration) {
	seconds := int64((retryAfter + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.FormatInt(max(seconds, 1), 10))
	writeError(w, http.StatusConflict, msgInProgress)
}
