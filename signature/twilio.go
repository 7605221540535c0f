package signature

import (
	"context"
	"crypto/sha1" // Twilio signs with HMAC-SHA1.
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"maps"
	"mime"
	"net/url"
	"slices"
	"strings"
)

// Twilio webhook headers.
const (
	// HeaderTwilioSignature carries the base64 HMAC-SHA1 of the URL and
	// the sorted form parameters.
	HeaderTwilioSignature = "X-Twilio-Signature"
	// HeaderTwilioIdempotencyToken carries a token kept across Twilio's
	// retries of one request.
	HeaderTwilioIdempotencyToken = "I-Twilio-Idempotency-Token"
)

// Twilio verifies Twilio's request signatures: the base64 HMAC-SHA1, keyed by
// the account's auth token, of the full URL Twilio requested followed by
// every form parameter of an application/x-www-form-urlencoded body as name
// then value, sorted by name (several values of one name sorted, duplicates
// once, as Twilio's Python library does). For other bodies (JSON) Twilio
// adds bodySHA256=<hex SHA-256 of the body> to the URL's query and signs the
// URL alone; the body must then match that hash. A request whose body is
// neither a form nor covered by bodySHA256 has a signature over the URL
// alone, which says nothing about the body: it verifies only with an empty
// body (ErrNoMatch otherwise), so that a captured URL-only signature cannot
// carry a body of an attacker's choosing.
//
// Twilio signs the URL it was configured with, which behind a proxy is not
// the one the server sees: set Options.PublicBaseURL. Because Twilio
// includes a port in the signed URL inconsistently, the URL is tried as
// given and with its port removed, or the scheme's default port added.
type Twilio struct {
	secrets SecretSource
	opts    *Options
	work    *workCounter
}

// NewTwilio returns a Twilio verifier with the account's auth tokens (the
// primary, and the secondary during a rotation) and options (nil for the
// defaults). Twilio signs no timestamp; opts.PublicBaseURL matters.
func NewTwilio(secrets SecretSource, opts *Options) *Twilio {
	return &Twilio{secrets: secrets, opts: opts}
}

// EventLocation reports that the event id is I-Twilio-Idempotency-Token.
// Twilio names no event type.
func (t *Twilio) EventLocation() EventLocation {
	return EventLocation{IDHeader: HeaderTwilioIdempotencyToken}
}

// Verify checks r's X-Twilio-Signature. See the package documentation for
// errors.
func (t *Twilio) Verify(ctx context.Context, r *Request) error {
	raw, err := signatureHeader(r.Header, HeaderTwilioSignature)
	if err != nil {
		return err
	}
	sig, err := Base64.decode(strings.TrimSpace(raw))
	if err != nil {
		return malformed(HeaderTwilioSignature, err.Error())
	}
	signedURL, err := t.opts.signedURL(r)
	if err != nil {
		return err
	}
	params, err := twilioParams(r, signedURL)
	if err != nil {
		return err
	}
	keys, err := rawKeys(ctx, t.secrets)
	if err != nil {
		return err
	}
	variants := twilioURLVariants(signedURL)
	contents := make([][][]byte, len(variants))
	for i, v := range variants {
		contents[i] = [][]byte{[]byte(v), params}
	}
	return matchMAC(t.work, sha1.New, keys, [][]byte{sig}, contents...)
}

// twilioParams returns the signed parameter string of r: empty when the URL
// carries bodySHA256 (after checking the body against it), the sorted form
// parameters of a form body, otherwise empty, which requires an empty body:
// the signature covers no other body.
func twilioParams(r *Request, signedURL string) ([]byte, error) {
	_, rest := splitOrigin(signedURL)
	_, query, _ := strings.Cut(rest, "?")
	query, _, _ = strings.Cut(query, "#")
	// A malformed pair is skipped, as Twilio's libraries do; it is signed as
	// part of the URL either way.
	values, _ := url.ParseQuery(query)
	if want := values.Get("bodySHA256"); want != "" {
		sum := sha256.Sum256(r.Body)
		got := hex.EncodeToString(sum[:])
		if subtle.ConstantTimeCompare([]byte(got), []byte(strings.ToLower(want))) != 1 {
			return nil, fmt.Errorf("%w: body does not match the URL's bodySHA256", ErrNoMatch)
		}
		return nil, nil
	}
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mediaType != "application/x-www-form-urlencoded" {
		if len(r.Body) > 0 {
			return nil, fmt.Errorf("%w: the body is neither a form nor covered by the URL's bodySHA256, so no signature covers it", ErrNoMatch)
		}
		return nil, nil
	}
	form, err := url.ParseQuery(string(r.Body))
	if err != nil {
		return nil, fmt.Errorf("%w: form body cannot be parsed", ErrMalformedHeader)
	}
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(form)) {
		vals := slices.Clone(form[name])
		slices.Sort(vals)
		for _, v := range slices.Compact(vals) {
			b.WriteString(name)
			b.WriteString(v)
		}
	}
	return []byte(b.String()), nil
}

// twilioURLVariants returns u and u with its port removed, or with the
// scheme's default port added when it has none.
func twilioURLVariants(u string) []string {
	origin, rest := splitOrigin(u)
	scheme, authority, _ := strings.Cut(origin, "://")
	host := authority[strings.LastIndexByte(authority, '@')+1:]
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		return []string{u, origin[:len(origin)-len(host)+i] + rest}
	}
	switch strings.ToLower(scheme) {
	case "https":
		return []string{u, origin + ":443" + rest}
	case "http":
		return []string{u, origin + ":80" + rest}
	}
	return []string{u}
}
