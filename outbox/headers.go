package outbox

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// Bounds of an endpoint's custom headers.
const (
	maxHeaderValues = 32      // values, counted over every name
	maxHeaderBytes  = 8 << 10 // names and values together
	maxHeaderName   = 256     // bytes of one name
)

// reservedHeaders are the headers an endpoint's Headers may not set, and
// why: Wharf sets them itself on every request, they govern the
// connection rather than the message (hop-by-hop), or they would carry a
// credential outside EndpointParams.Auth, where it would not be kept
// secret.
var reservedHeaders = map[string]string{
	"Webhook-Id":          "Wharf sets it (Standard Webhooks)",
	"Webhook-Timestamp":   "Wharf sets it (Standard Webhooks)",
	"Webhook-Signature":   "Wharf sets it (Standard Webhooks)",
	"Content-Type":        "Wharf sets it",
	"Content-Length":      "Wharf sets it",
	"Content-Encoding":    "the body is not encoded",
	"Host":                "it is the URL's",
	"User-Agent":          "Wharf sets it",
	"Traceparent":         "Wharf sets it (trace context)",
	"Tracestate":          "Wharf sets it (trace context)",
	"Authorization":       "use EndpointParams.Auth, which keeps credentials secret",
	"Proxy-Authorization": "a hop-by-hop header",
	"Proxy-Authenticate":  "a hop-by-hop header",
	"Proxy-Connection":    "a hop-by-hop header",
	"Connection":          "a hop-by-hop header",
	"Keep-Alive":          "a hop-by-hop header",
	"Te":                  "a hop-by-hop header",
	"Trailer":             "a hop-by-hop header",
	"Transfer-Encoding":   "a hop-by-hop header",
	"Upgrade":             "a hop-by-hop header",
	"Expect":              "it changes how the request is sent",
}

// checkHeaders validates an endpoint's custom headers and returns them with
// canonical names (names differing only in case merged, in sorted order),
// or an ErrInvalidEndpoint error that names the header but never quotes a
// value.
func checkHeaders(h http.Header) (http.Header, error) {
	out := make(http.Header, len(h))
	values, size := 0, 0
	for _, name := range slices.Sorted(maps.Keys(h)) {
		if err := checkHeaderName(name); err != nil {
			return nil, fmt.Errorf("%w: header %w", ErrInvalidEndpoint, err)
		}
		canonical := http.CanonicalHeaderKey(name)
		if why, ok := reservedHeaders[canonical]; ok {
			return nil, fmt.Errorf("%w: header %s cannot be set: %s", ErrInvalidEndpoint, canonical, why)
		}
		if len(h[name]) == 0 {
			return nil, fmt.Errorf("%w: header %s has no value", ErrInvalidEndpoint, canonical)
		}
		for i, v := range h[name] {
			if !validHeaderValue(v) {
				return nil, fmt.Errorf("%w: header %s value %d holds a control character or is not UTF-8", ErrInvalidEndpoint, canonical, i)
			}
			values++
			size += len(canonical) + len(v)
			out[canonical] = append(out[canonical], v)
		}
	}
	if values > maxHeaderValues {
		return nil, fmt.Errorf("%w: more than %d header values", ErrInvalidEndpoint, maxHeaderValues)
	}
	if size > maxHeaderBytes {
		return nil, fmt.Errorf("%w: headers longer than %d bytes in all", ErrInvalidEndpoint, maxHeaderBytes)
	}
	return out, nil
}

// checkHeaderName accepts an RFC 9110 token of at most maxHeaderName bytes.
func checkHeaderName(name string) error {
	if name == "" || len(name) > maxHeaderName {
		return fmt.Errorf("names must be 1 to %d bytes", maxHeaderName)
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Errorf("name %q is not an HTTP token", name)
		}
	}
	return nil
}

func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// validHeaderValue accepts UTF-8 without control characters other than
// horizontal tab (so no CR, LF or NUL), as Postgres and HTTP both need.
func validHeaderValue(v string) bool {
	if checkText("value", v) != nil {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
