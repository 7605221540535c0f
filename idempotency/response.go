package idempotency

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// recorder buffers a handler's response. Nothing reaches the client until
// the outcome is recorded: a client must never see a success that a retry
// would not replay.
//
// Handlers that stream (http.Flusher) are not supported: flushing is not
// offered, and the response is sent whole once the handler returns.
type recorder struct {
	header http.Header
	sent   http.Header // header as it was when the status was written
	status int
	body   []byte
}

func newRecorder() *recorder {
	return &recorder{header: http.Header{}}
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
	rec.body = append(rec.body, p...)
	return len(p), nil
}

// finish settles the status of a handler that wrote nothing (200, as
// net/http does) and returns it.
func (rec *recorder) finish() int {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	return rec.status
}

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
