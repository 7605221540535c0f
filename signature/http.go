package signature

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
)

// DefaultMaxBodyBytes is the largest body VerifyHTTP reads when its limit is
// 0: 1 MiB, the inbox's default too.
const DefaultMaxBodyBytes = 1 << 20

var (
	// ErrBodyTooLarge means VerifyHTTP refused a body longer than its limit,
	// before verifying anything: answer 413.
	ErrBodyTooLarge = errors.New("signature: body too large")
	// ErrUnreadableBody means VerifyHTTP could not read the request body,
	// as when the client goes away mid-request: answer 400, if anything.
	ErrUnreadableBody = errors.New("signature: body could not be read")
)

// VerifyHTTP verifies an incoming *http.Request with v in one call, for a
// receiver that handles webhooks itself rather than through the inbox
// (a receiver of Wharf's own webhooks, say). It reads r's body, at most
// maxBodyBytes of it (0 means DefaultMaxBodyBytes), and returns it once v
// accepts the request. Whatever the outcome, r.Body is left reading the
// whole body again from its start, so the handler after VerifyHTTP reads
// it as if untouched; the returned slice backs that reader, so treat it as
// read-only.
//
// The Request v sees holds r's method, headers and raw body, and the URL
// the request was sent to, for schemes that sign it: the request target as
// received (r.RequestURI) after the scheme and r.Host, the scheme being
// https when the connection is TLS or X-Forwarded-Proto says https, as the
// inbox does. The client chooses all of these, so they help only a genuine
// signature match (the URL is checked, never trusted), but a signature
// captured for one host or scheme then verifies at another reaching the
// same handler and secret. Behind a proxy, or to pin the URL, set the
// verifier's Options.PublicBaseURL: it replaces the scheme and host the
// server saw, keeping only the path and query.
//
// Errors match, with errors.Is, these sentinels, each with the answer it
// calls for:
//
//	ErrBodyTooLarge     413: longer than the limit (a Content-Length over it is refused unread)
//	ErrUnreadableBody   400: the body could not be read
//	ErrNoSecrets        503: the receiving side's problem, such as a secret store that is down
//	ErrInvalidOptions   503: the receiving side's problem: a nil v, a negative maxBodyBytes or
//	                    invalid verifier Options (ReceiverFault matches both)
//	anything else       401: v's verdict (ErrMissingHeader, ErrMalformedHeader, ErrStaleTimestamp,
//	                    ErrNoMatch from the package's verifiers)
//
// None of them contains the body, a secret or a signature.
func VerifyHTTP(ctx context.Context, v Verifier, r *http.Request, maxBodyBytes int64) ([]byte, error) {
	switch {
	case v == nil:
		return nil, &optionsError{problem: "VerifyHTTP has no Verifier"}
	case maxBodyBytes < 0:
		return nil, &optionsError{problem: fmt.Sprintf("VerifyHTTP's maxBodyBytes is %d; 0 means DefaultMaxBodyBytes", maxBodyBytes)}
	case maxBodyBytes == 0:
		maxBodyBytes = DefaultMaxBodyBytes
	}
	body, err := readBody(r, maxBodyBytes)
	if err != nil {
		return nil, err
	}
	req := &Request{Method: r.Method, URL: requestURL(r), Header: r.Header, Body: body}
	if err := v.Verify(ctx, req); err != nil {
		return nil, err
	}
	return body, nil
}

// readBody reads at most limit bytes of r's body and puts back a body that
// reads them again, followed by whatever was left unread.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil {
		return []byte{}, nil
	}
	if r.ContentLength > limit {
		return nil, bodyTooLarge(limit)
	}
	original := r.Body
	n := limit
	if n < math.MaxInt64 {
		n++ // one byte more than allowed tells a body at the limit from a longer one
	}
	body, err := io.ReadAll(io.LimitReader(original, n))
	if err == nil && int64(len(body)) <= limit {
		// The original is at its end: only what was read remains.
		r.Body = &replayedBody{Reader: bytes.NewReader(body), Closer: original}
		return body, nil
	}
	r.Body = &replayedBody{Reader: io.MultiReader(bytes.NewReader(body), original), Closer: original}
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return nil, bodyTooLarge(limit)
	case errors.As(err, &tooLarge):
		// A handler before this one wrapped the body in http.MaxBytesReader.
		return nil, bodyTooLarge(tooLarge.Limit)
	}
	return nil, fmt.Errorf("%w: %w", ErrUnreadableBody, err)
}

func bodyTooLarge(limit int64) error {
	return fmt.Errorf("%w: longer than %d bytes", ErrBodyTooLarge, limit)
}

// replayedBody is a request body put back after VerifyHTTP read it: it
// reads the same bytes again and closes the original.
type replayedBody struct {
	io.Reader
	io.Closer
}

// requestURL is the URL r was sent to, absolute when r says enough: the
// request target as received, after the scheme (https over TLS or when
// X-Forwarded-Proto says so) and host. Options.PublicBaseURL, when the
// verifier has one, replaces all but the path and query.
func requestURL(r *http.Request) string {
	if r.URL != nil && r.URL.IsAbs() {
		return r.URL.String() // an absolute-form request target, or a client's request
	}
	target := r.RequestURI
	if !strings.HasPrefix(target, "/") && r.URL != nil {
		// A request built in code, or "*": the URL as parsed.
		target = r.URL.RequestURI()
	}
	if r.Host == "" {
		return target
	}
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https") {
		scheme = "https"
	}
	return scheme + "://" + r.Host + target
}
