package signature

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultTolerance is how far a signed timestamp may be from now, either way,
// unless Options.Tolerance says otherwise.
const DefaultTolerance = 5 * time.Minute

// Limits on a signature header, checked before it is parsed or any secret is
// read, so that what a request can make a verifier do is bounded before the
// request is authenticated.
const (
	// MaxSignatureHeaderBytes is the longest signature header a verifier
	// reads; a longer one is refused with ErrMalformedHeader. Real headers
	// are far shorter (sixteen Standard Webhooks v1a entries take 1.5 KiB),
	// and 8 KiB is also the longest header line common proxies pass by
	// default, which leaves room for signature versions yet to come.
	MaxSignatureHeaderBytes = 8 << 10
	// MaxSignatureEntries is the most entries a signature header may hold:
	// space-separated signatures in Standard Webhooks, key=value entries
	// (the timestamp, and versions the verifier skips, included) in Stripe's
	// and Paddle's. More is refused with ErrMalformedHeader. Senders add one
	// entry per secret they sign with, a few during a rotation. A request
	// costs at most this many signature verifications per key, and one MAC
	// per key however many entries it holds.
	MaxSignatureEntries = 16
)

var (
	// ErrMissingHeader means a header the scheme requires is absent or empty.
	ErrMissingHeader = errors.New("signature: missing header")
	// ErrMalformedHeader means a header is present but cannot be parsed, a
	// signature header is sent more than once or exceeds
	// MaxSignatureHeaderBytes or MaxSignatureEntries, or (Twilio) the form
	// body its signature covers cannot be parsed.
	ErrMalformedHeader = errors.New("signature: malformed header")
	// ErrStaleTimestamp means the signed timestamp is outside the tolerance.
	ErrStaleTimestamp = errors.New("signature: timestamp outside tolerance")
	// ErrNoMatch means no signature in the request matches any secret (for
	// Twilio, also: the body does not match the bodySHA256 it was sent with,
	// a body that is neither a form nor covered by bodySHA256 is not empty,
	// or the request URL is not absolute and Options.PublicBaseURL is unset).
	ErrNoMatch = errors.New("signature: no matching signature")
	// ErrNoSecrets means the verifier has no usable secret (none configured,
	// a secret source that failed, a key that cannot be used): a problem on
	// the receiving side, not the sender's fault.
	ErrNoSecrets = errors.New("signature: no secret configured")
	// ErrInvalidOptions means the verifier's Options are invalid, such as a
	// negative Tolerance other than -1, or invalid arguments to VerifyHTTP.
	// Such a verifier fails closed: it refuses every request its check
	// would apply to. Like ErrNoSecrets it is the receiving side's problem
	// (the inbox answers 503 and logs an error); the two are distinct so
	// that a log or an alert can tell a broken configuration from a secret
	// store that is down.
	ErrInvalidOptions = errors.New("signature: invalid options")
)

// optionsError is an ErrInvalidOptions error.
type optionsError struct{ problem string }

func (e *optionsError) Error() string { return ErrInvalidOptions.Error() + ": " + e.problem }

// Is matches ErrInvalidOptions.
func (e *optionsError) Is(target error) bool { return target == ErrInvalidOptions }

// ReceiverFault reports whether err is the receiving side's problem rather
// than the sender's: ErrNoSecrets or ErrInvalidOptions. Answer such a
// request 503 (retry later) and alert, rather than 401.
func ReceiverFault(err error) bool {
	return errors.Is(err, ErrNoSecrets) || errors.Is(err, ErrInvalidOptions)
}

// Request is what a verifier sees of an incoming webhook.
type Request struct {
	// Method is the HTTP method.
	Method string
	// URL is the URL the request was sent to, for schemes that sign it
	// (Twilio, NewHMAC templates using {url}): absolute, or only path and
	// query when Options.PublicBaseURL supplies the rest. Behind a proxy the
	// sender signed the public URL, not the one the server saw.
	URL string
	// Header holds the request headers.
	Header http.Header
	// Body is the raw request body, exactly as received.
	Body []byte
}

// Verifier checks that a request was signed by a holder of a secret.
type Verifier interface {
	// Verify returns nil when r is authentic, otherwise an error for which
	// errors.Is matches one of the package's sentinel errors.
	Verify(ctx context.Context, r *Request) error
}

// VerifierFunc adapts a function to the Verifier interface.
type VerifierFunc func(ctx context.Context, r *Request) error

// Verify calls f.
func (f VerifierFunc) Verify(ctx context.Context, r *Request) error { return f(ctx, r) }

// EventLocation says where a provider puts the event id that every delivery
// of one event shares, and the event type. Empty fields mean "not there".
// The inbox reads them, before its own defaults.
//
// A provider that sends one value under several header names (Svix's
// svix-id or webhook-id, Shopify's X-Shopify-Event-Id or shopify-event-id)
// lists them in the order they are tried: IDHeaders and TypeHeaders return
// that order. A verifier that accepts several signed header sets verifies
// each request with the set whose id header comes first in IDHeaders among
// those the request carries, so the id read first is the one its signature
// covers.
type EventLocation struct {
	// IDHeader is the header holding the event id (webhook-id,
	// X-GitHub-Delivery…). Consulted first.
	IDHeader string
	// AltIDHeader is the header holding the event id when IDHeader is absent
	// (Svix: webhook-id, when svix-id is absent).
	AltIDHeader string
	// MoreIDHeaders are further headers holding the event id, consulted in
	// order when IDHeader and AltIDHeader are absent (Shopify: its webhook
	// ids, after its event ids).
	MoreIDHeaders []string
	// IDField is the JSON body field holding the event id (id, event_id…),
	// consulted when no id header is present. A dot descends into nested
	// objects ("event.id").
	IDField string
	// TypeHeader is the header holding the event type (X-GitHub-Event…).
	TypeHeader string
	// MoreTypeHeaders are further headers holding the event type,
	// consulted in order when TypeHeader is absent (Shopify: shopify-topic
	// after X-Shopify-Topic).
	MoreTypeHeaders []string
	// TypeField is the JSON body field holding the event type, consulted
	// when no type header is present. A dot descends into nested objects
	// ("event.type").
	TypeField string
	// SignedHeaders lists the headers, besides the signature header itself,
	// whose values the signature covers (canonical or as the scheme spells
	// them; compare case-insensitively). A captured request cannot be
	// replayed with another value in them. The body is always covered. The
	// inbox reads an event id from a header outside this list only when the
	// scheme names that header as its provider's id (GitHub, Shopify,
	// Twilio) or the source says so.
	SignedHeaders []string
}

// clone returns l with slices of its own.
func (l EventLocation) clone() EventLocation {
	l.MoreIDHeaders = slices.Clone(l.MoreIDHeaders)
	l.MoreTypeHeaders = slices.Clone(l.MoreTypeHeaders)
	l.SignedHeaders = slices.Clone(l.SignedHeaders)
	return l
}

// IDHeaders returns the headers holding the event id in the order they are
// tried: IDHeader, AltIDHeader, then MoreIDHeaders, without blanks or
// repeats (compared case-insensitively).
func (l EventLocation) IDHeaders() []string {
	return headerList(append([]string{l.IDHeader, l.AltIDHeader}, l.MoreIDHeaders...))
}

// TypeHeaders returns the headers holding the event type in the order they
// are tried: TypeHeader, then MoreTypeHeaders, without blanks or repeats.
func (l EventLocation) TypeHeaders() []string {
	return headerList(append([]string{l.TypeHeader}, l.MoreTypeHeaders...))
}

// headerList returns names without empty ones and without repeats, which
// http.Header reads alike whatever their case.
func headerList(names []string) []string {
	out := names[:0]
	for _, name := range names {
		if name != "" && !slices.ContainsFunc(out, func(o string) bool { return strings.EqualFold(o, name) }) {
			out = append(out, name)
		}
	}
	return slices.Clip(out)
}

// Signs reports whether the signature covers header name.
func (l EventLocation) Signs(name string) bool {
	for _, h := range l.SignedHeaders {
		if strings.EqualFold(h, name) {
			return true
		}
	}
	return false
}

// EventLocator is implemented by verifiers that know where their provider
// puts the event id and type; the inbox uses it before its own defaults.
type EventLocator interface {
	EventLocation() EventLocation
}

// SecretSource supplies a verifier's secrets. It is consulted on every
// request, so secrets can be rotated without a restart by backing it with the
// application's own store; such an implementation should cache.
type SecretSource interface {
	// Secrets returns every currently valid secret, newest first.
	Secrets(ctx context.Context) ([]string, error)
}

// Secrets is a fixed list of secrets, newest first.
type Secrets []string

// Secrets returns s.
func (s Secrets) Secrets(context.Context) ([]string, error) { return s, nil }

// Options tunes verification. A nil *Options means the defaults.
type Options struct {
	// Tolerance is how far the signed timestamp may be from now, in either
	// direction, for schemes that sign one. Defaults to DefaultTolerance; -1
	// (exactly -1, one nanosecond) disables the check. Any other negative
	// value, such as a mistyped -5*time.Minute, is a configuration error:
	// the verifier then refuses every request of a timestamped scheme with
	// an error matching ErrInvalidOptions rather than
	// silently skip the check.
	Tolerance time.Duration
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// PublicBaseURL is the scheme, host and optional path prefix senders use
	// to reach this server ("https://hooks.example.com" or
	// "https://example.com/api"), for schemes that sign the URL (Twilio,
	// NewHMAC templates using {url}). Request.URL's path and query are
	// appended to it, replacing whatever scheme and host the server saw —
	// proxies rewrite those. Defaults to Request.URL as it is, which must
	// then be absolute.
	PublicBaseURL string
}

func (o *Options) tolerance() time.Duration {
	if o == nil || o.Tolerance == 0 {
		return DefaultTolerance
	}
	return o.Tolerance
}

func (o *Options) now() time.Time {
	if o == nil || o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

// toleranceDisabled is the one Tolerance value that disables the check.
const toleranceDisabled = -1

// checkTimestamp enforces the tolerance around now for a signed unix time,
// any int64 a sender can write.
func (o *Options) checkTimestamp(signed int64) error {
	tolerance := o.tolerance()
	switch {
	case tolerance == toleranceDisabled:
		return nil
	case tolerance < 0:
		return &optionsError{problem: fmt.Sprintf("Tolerance is %s; only -1 disables the timestamp check", tolerance)}
	}
	off := offsetOf(o.now(), signed)
	tolSec, tolNsec := uint64(tolerance/time.Second), int64(tolerance%time.Second)
	if off.sec < tolSec || off.sec == tolSec && off.nsec <= tolNsec {
		return nil
	}
	return off.staleError(signed, tolerance)
}

// offset is the distance between now and a signed unix second, in whole
// seconds and nanoseconds (below one second), and its direction. It is exact
// for any int64 a sender can write, where time.Unix overflows and Time.Sub
// saturates: larger minus smaller of two int64s is exact in uint64.
type offset struct {
	sec    uint64
	nsec   int64
	future bool // signed after now
}

func offsetOf(now time.Time, signed int64) offset {
	nowSec, nowNsec := now.Unix(), int64(now.Nanosecond())
	if signed <= nowSec {
		return offset{sec: uint64(nowSec) - uint64(signed), nsec: nowNsec}
	}
	// signed - now = (ahead-1)s + (1s - nowNsec).
	off := offset{sec: uint64(signed) - uint64(nowSec) - 1, nsec: int64(time.Second) - nowNsec, future: true}
	if off.nsec == int64(time.Second) {
		off.sec, off.nsec = off.sec+1, 0
	}
	return off
}

// maxWrittenSeconds is the longest offset staleError writes as a Duration:
// about 292 years.
const maxWrittenSeconds = math.MaxInt64/int64(time.Second) - 1

// staleError says when a request was signed and how far that is from now:
// the raw unix seconds always, the date too when it is near enough to be
// written (RFC 3339 has four-digit years).
func (off offset) staleError(signed int64, tolerance time.Duration) error {
	direction := "in the past"
	if off.future {
		direction = "in the future"
	}
	if off.sec > uint64(maxWrittenSeconds) {
		return fmt.Errorf("%w: signed at unix %d, more than %d years %s, tolerance %s",
			ErrStaleTimestamp, signed, maxWrittenSeconds/(365*24*3600), direction, tolerance)
	}
	var date string
	if t := time.Unix(signed, 0).UTC(); 0 <= t.Year() && t.Year() <= 9999 {
		date = " (" + t.Format(time.RFC3339) + ")"
	}
	return fmt.Errorf("%w: signed at unix %d%s, %s %s, tolerance %s", ErrStaleTimestamp, signed, date,
		time.Duration(off.sec)*time.Second+time.Duration(off.nsec), direction, tolerance)
}

// signedURL is the URL a sender signed for r: PublicBaseURL followed by
// r.URL's path and query when set, else r.URL, which must be absolute. An
// error wraps ErrNoMatch: without the public URL no signature can match.
func (o *Options) signedURL(r *Request) (string, error) {
	origin, rest := splitOrigin(r.URL)
	if o != nil && o.PublicBaseURL != "" {
		return strings.TrimSuffix(o.PublicBaseURL, "/") + rest, nil
	}
	if origin == "" {
		return "", fmt.Errorf("%w: request URL is not absolute; set Options.PublicBaseURL to the URL senders use", ErrNoMatch)
	}
	return r.URL, nil
}

// splitOrigin splits an absolute URL into "scheme://authority" and the path,
// query and fragment after it, kept byte for byte because they are signed as
// sent. A relative URL has an empty origin.
func splitOrigin(u string) (origin, rest string) {
	scheme, after, ok := strings.Cut(u, "://")
	if !ok || !isURLScheme(scheme) {
		return "", u
	}
	end := strings.IndexAny(after, "/?#")
	if end < 0 {
		return u, ""
	}
	n := len(scheme) + len("://") + end
	return u[:n], u[n:]
}

// isURLScheme reports whether s is a URL scheme (RFC 3986: a letter, then
// letters, digits, "+", "-" or ".").
func isURLScheme(s string) bool {
	for i, c := range s {
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !letter && (i == 0 || !('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return s != ""
}

// parseUnix parses integer unix seconds.
func parseUnix(v string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, errors.New("not integer unix seconds")
	}
	return n, nil
}

// secretsOf fetches the current secrets and drops empty ones.
func secretsOf(ctx context.Context, src SecretSource) ([]string, error) {
	if src == nil {
		return nil, ErrNoSecrets
	}
	all, err := src.Secrets(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: secret source: %w", ErrNoSecrets, err)
	}
	out := all[:0:0]
	for _, s := range all {
		if s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, ErrNoSecrets
	}
	return out, nil
}

// header returns the first value of name, which must not be empty.
func header(h http.Header, name string) (string, error) {
	v := h.Get(name)
	if v == "" {
		return "", fmt.Errorf("%w: %s", ErrMissingHeader, name)
	}
	return v, nil
}

// signatureHeader returns the value of a scheme's signature header, refusing
// one sent more than once (which of them would the sender have meant?) or
// longer than MaxSignatureHeaderBytes before anything reads it further.
func signatureHeader(h http.Header, name string) (string, error) {
	values := h.Values(name)
	switch {
	case len(values) > 1:
		return "", malformed(name, fmt.Sprintf("sent %d times; a request carries one", len(values)))
	case len(values) == 0 || values[0] == "":
		return "", fmt.Errorf("%w: %s", ErrMissingHeader, name)
	case len(values[0]) > MaxSignatureHeaderBytes:
		return "", malformed(name, fmt.Sprintf("%d bytes, more than MaxSignatureHeaderBytes (%d)", len(values[0]), MaxSignatureHeaderBytes))
	}
	return values[0], nil
}

// agreeingSignatureHeader returns the first of names that h carries, and its
// value, for a signature sent under several names. Every name carried is
// held to signatureHeader's checks, and all must hold the same value: a
// request whose signatures disagree is refused rather than verified with
// one chosen for it. An empty header counts as absent.
func agreeingSignatureHeader(h http.Header, names []string) (name, value string, err error) {
	for _, n := range names {
		if vs := h.Values(n); len(vs) == 0 || len(vs) == 1 && vs[0] == "" {
			continue
		}
		v, err := signatureHeader(h, n)
		if err != nil {
			return "", "", err
		}
		switch {
		case name == "":
			name, value = n, v
		case v != value:
			return "", "", malformed(name, "differs from "+n+"; a request carries one signature")
		}
	}
	if name == "" {
		return "", "", fmt.Errorf("%w: %s", ErrMissingHeader, strings.Join(names, " or "))
	}
	return name, value, nil
}
