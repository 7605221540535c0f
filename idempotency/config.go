package idempotency

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/wharfhq/wharf/internal/shared"
)

// Defaults for the fields of Config.
const (
	// DefaultKeyRetention is how long a key is kept after it is claimed.
	DefaultKeyRetention = 24 * time.Hour
	// DefaultInProgressTimeout is how long a key may stay in progress before
	// a retry may take it over.
	DefaultInProgressTimeout = 5 * time.Minute
	// DefaultRetryAfter is the Retry-After sent with 409 In Progress.
	DefaultRetryAfter = time.Second
	// DefaultMaxRequestBody is the largest request body read, in bytes.
	DefaultMaxRequestBody = 1 << 20
	// DefaultMaxStoredResponseBody is the largest response body stored for
	// replay, in bytes.
	DefaultMaxStoredResponseBody = 64 << 10
	// DefaultMaxBufferedResponseBody is the most response body held in
	// memory per request, in bytes.
	DefaultMaxBufferedResponseBody = 1 << 20
)

// PrincipalFunc returns who a request acts for (the authenticated account,
// say). Keys are scoped by it: the same key from two principals names two
// requests, and one principal's stored response is never replayed to
// another. An empty result means the request has no principal; the
// middleware then refuses it with 401 rather than share keys between
// strangers. A route that really has no principal returns a constant.
//
// It is called after the request body has been read and replaced, and must
// not consume it.
type PrincipalFunc func(r *http.Request) string

// Config tunes a Middleware. A nil *Config means the defaults. One
// Middleware serves any number of routes; routes that need different
// settings (one requires a key, another does not) use one Middleware each.
type Config struct {
	// Methods lists the HTTP methods the middleware applies to. Requests with
	// other methods pass through untouched, even with a key. Defaults to POST
	// and PATCH.
	Methods []string

	// RequireKey makes a request without an Idempotency-Key header fail with
	// 400. Defaults to false: such a request passes through with no key
	// recorded (in transactional mode, still inside a transaction).
	RequireKey bool

	// Transactional runs the handler inside a database transaction that also
	// records the key's outcome, available to the handler through Tx: the
	// handler's writes and the stored response commit, or roll back,
	// together. Defaults to false: the handler runs outside any transaction
	// of the middleware's and its response is recorded after it returns.
	Transactional bool

	// Route names the route a request is for; keys are scoped by it. It must
	// return 1 to 512 bytes of UTF-8 without NUL. Defaults to the pattern the
	// request matched in an http.ServeMux (Request.Pattern, e.g.
	// "POST /payouts/{id}") when there is one, otherwise the request's
	// escaped URL path.
	Route func(r *http.Request) string

	// KeyRetention is how long a key, with its stored response, is kept
	// after it is claimed. An expired key is treated as never used, even
	// before DeleteExpired removes it. Claim time and expiry are the
	// database's clock, never a node's, so nodes whose clocks disagree
	// agree on which keys have expired. In non-transactional mode it must
	// exceed InProgressTimeout. Defaults to DefaultKeyRetention (24 hours).
	KeyRetention time.Duration

	// InProgressTimeout is how long a key may stay in progress before a
	// retry of the same request may take it over, on the presumption that
	// the process that claimed it died. It is measured by the database's
	// clock from the claim, so a node whose clock runs ahead of the
	// claimant's cannot take over early. It matters in non-transactional mode
	// only (a transactional claim is never committed in progress) and must
	// exceed the longest the handler can run: a takeover while the first
	// handler still runs would run the handler twice. In non-transactional
	// mode KeyRetention must be longer (New refuses it otherwise): a key
	// that expired while in progress would be new again at once. Defaults
	// to DefaultInProgressTimeout (5 minutes).
	InProgressTimeout time.Duration

	// RetryAfter is the delay suggested, in the Retry-After header rounded
	// up to whole seconds, to a client told 409 because its key is in
	// progress. Defaults to DefaultRetryAfter (1 second).
	RetryAfter time.Duration

	// MaxRequestBody is the largest request body, in bytes, the middleware
	// reads to fingerprint a request that has a key; a larger one is refused
	// with 413. Defaults to DefaultMaxRequestBody (1 MiB); -1 removes the
	// limit.
	MaxRequestBody int64

	// MaxStoredResponseBody is the largest response body, in bytes, stored
	// for replay. A larger response is still sent in full and the key still
	// completed, but its replays carry the status and headers with an empty
	// body and HeaderBodyOmitted (a truncated body would be worse than
	// none). It may not exceed MaxBufferedResponseBody. Defaults to
	// DefaultMaxStoredResponseBody (64 KiB); -1 removes the limit, and then
	// MaxBufferedResponseBody must be -1 too.
	MaxStoredResponseBody int64

	// MaxBufferedResponseBody bounds the memory a request holds: the most
	// response body, in bytes, the middleware buffers while the handler
	// writes, before anything is sent. A handler that writes more is
	// treated by mode:
	//
	//   - Non-transactional: the outcome is recorded as the handler crosses
	//     the limit (the key completed with the status and headers, the body
	//     not stored, as past MaxStoredResponseBody; a 5xx, 408, 425 or 429
	//     releases the key instead), and only then is the response sent,
	//     the rest streaming to the client as the handler writes it.
	//   - Transactional: nothing may reach the client before the commit, so
	//     writes past the limit fail with ErrResponseTooLarge, the handler's
	//     writes roll back, the key is released and the client gets 500.
	//
	// Defaults to DefaultMaxBufferedResponseBody (1 MiB); -1 removes the
	// limit (the whole response is held in memory).
	MaxBufferedResponseBody int64

	// ReplayHeaders names the response headers stored and replayed with the
	// status and body. Defaults to Content-Type and Location.
	ReplayHeaders []string

	// Logger receives the middleware's logs. Request and response bodies
	// are never logged. Defaults to slog.Default().
	Logger *slog.Logger

	// MeterProvider receives wharf_idempotency_requests_total{outcome}:
	// new (the handler ran), replayed, in_progress (409) and conflict (the
	// key reused for another request: 422). Defaults to the global
	// MeterProvider.
	MeterProvider metric.MeterProvider
}

// resolve returns a copy of c (which may be nil) with defaults filled in, or
// an error naming the first invalid field.
// ErrInvalidConfig is returned by New for a Config it cannot use (or a
// missing pool or principal); the error lists every problem at once.
var ErrInvalidConfig = errors.New("idempotency: invalid config")

// Validate reports every problem with c (a nil c is the defaults, which are
// valid), joined in one error where errors.Is(err, ErrInvalidConfig) is
// true. New calls it.
func (c *Config) Validate() error {
	_, err := c.resolve()
	return err
}

func (c *Config) resolve() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Methods == nil {
		out.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	p := shared.NewProblems(ErrInvalidConfig)
	if len(out.Methods) == 0 {
		p.Addf("Config.Methods is empty; leave it nil for the default (POST, PATCH)")
	}
	for _, method := range out.Methods {
		if !isMethod(method) {
			p.Addf("Config.Methods: %q is not an upper-case HTTP method such as POST", method)
		}
	}
	if out.Route == nil {
		out.Route = defaultRoute
	}
	durations := []struct {
		name  string
		value *time.Duration
		def   time.Duration
	}{
		{"KeyRetention", &out.KeyRetention, DefaultKeyRetention},
		{"InProgressTimeout", &out.InProgressTimeout, DefaultInProgressTimeout},
		{"RetryAfter", &out.RetryAfter, DefaultRetryAfter},
	}
	for _, d := range durations {
		if *d.value < 0 {
			p.Addf("Config.%s is negative (%s)", d.name, *d.value)
		}
		if *d.value == 0 {
			*d.value = d.def
		}
	}
	if !out.Transactional && out.KeyRetention <= out.InProgressTimeout {
		// A key left in progress would expire, and so be free for a retry
		// to run the handler again, before the takeover timeout protects it.
		p.Addf("Config.KeyRetention (%s) must be longer than Config.InProgressTimeout (%s) in non-transactional mode",
			out.KeyRetention, out.InProgressTimeout)
	}
	limits := []struct {
		name  string
		value *int64
		def   int64
	}{
		{"MaxRequestBody", &out.MaxRequestBody, DefaultMaxRequestBody},
		{"MaxStoredResponseBody", &out.MaxStoredResponseBody, DefaultMaxStoredResponseBody},
		{"MaxBufferedResponseBody", &out.MaxBufferedResponseBody, DefaultMaxBufferedResponseBody},
	}
	for _, l := range limits {
		if *l.value < -1 {
			p.Addf("Config.%s is %d; use -1 for no limit", l.name, *l.value)
		}
		if *l.value == 0 {
			*l.value = l.def
		}
	}
	if buffered, stored := out.MaxBufferedResponseBody, out.MaxStoredResponseBody; buffered >= 0 && (stored < 0 || stored > buffered) {
		// A body is stored from the buffer: one that was not buffered
		// cannot be.
		p.Addf("Config.MaxStoredResponseBody (%d) exceeds Config.MaxBufferedResponseBody (%d); -1 means no limit",
			stored, buffered)
	}
	if out.ReplayHeaders == nil {
		out.ReplayHeaders = []string{"Content-Type", "Location"}
	}
	canonical := make([]string, 0, len(out.ReplayHeaders))
	for _, name := range out.ReplayHeaders {
		if !isToken(name) {
			p.Addf("Config.ReplayHeaders: %q is not a header name", name)
		}
		canonical = append(canonical, http.CanonicalHeaderKey(name))
	}
	out.ReplayHeaders = canonical
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out, p.Err()
}

// defaultRoute is Config.Route's default.
func defaultRoute(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.URL.EscapedPath()
}

func isMethod(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// isToken reports whether s is an RFC 9110 token, the syntax of header names.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)):
		default:
			return false
		}
	}
	return true
}
