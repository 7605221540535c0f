// Package egress sends the outbox's requests: an HTTP client whose every
// connection passes the SSRF guard (or goes to the configured proxy
// alone), that follows no redirect and bounds what a response may make it
// read, and the cache of the endpoints' OAuth 2.0 access tokens. Send makes
// one signed delivery attempt and says what it learned (an Outcome); it
// records nothing.
package egress

import (
	"cmp"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"time"
)

// Defaults of the Config fields that have one.
const (
	DefaultResponseBodyLimit   = 16 << 10
	DefaultResponseHeaderLimit = 16 << 10
	DefaultDialTimeout         = 10 * time.Second
)

// Config configures a Client; its fields are outbox.Config's of the same
// names, which document them.
type Config struct {
	// AllowPrivateNetworks lets requests reach loopback, private, shared,
	// link-local and unique-local addresses (not cloud metadata).
	AllowPrivateNetworks bool
	// AllowedNetworks lists networks requests may reach whatever the guard
	// says.
	AllowedNetworks []netip.Prefix
	// Dialer dials connections; its Control runs after the guard accepted
	// the address. Defaults to a net.Dialer with DefaultDialTimeout.
	Dialer *net.Dialer
	// Transport is the template of the transport. Defaults to one with
	// HTTP/2 and a pool of idle connections.
	Transport *http.Transport
	// WrapTransport wraps the transport, once, in New.
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// Proxy is the proxy every request goes through. Defaults to none.
	Proxy *url.URL
	// ResponseBodyLimit is how much of a response body an Outcome keeps
	// (-1: none). Defaults to DefaultResponseBodyLimit.
	ResponseBodyLimit int
	// ResponseHeaderLimit bounds a response's headers. Defaults to
	// DefaultResponseHeaderLimit.
	ResponseHeaderLimit int
	// Now stamps signatures and times token refreshes. Defaults to
	// time.Now.
	Now func() time.Time
}

// Client sends the outbox's requests. It is safe for concurrent use.
type Client struct {
	config Config
	guard  *guard
	http   *http.Client
	tokens *tokenCache
}

// New returns a Client of cfg (nil: every default).
func New(cfg *Config) *Client {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.AllowedNetworks = slices.Clone(c.AllowedNetworks)
	c.Dialer = cmp.Or(c.Dialer, &net.Dialer{Timeout: DefaultDialTimeout})
	c.ResponseBodyLimit = cmp.Or(c.ResponseBodyLimit, DefaultResponseBodyLimit)
	c.ResponseHeaderLimit = cmp.Or(c.ResponseHeaderLimit, DefaultResponseHeaderLimit)
	if c.Now == nil {
		c.Now = time.Now
	}
	g := &guard{allowPrivate: c.AllowPrivateNetworks, allowed: c.AllowedNetworks}
	client := newHTTPClient(&c, g)
	return &Client{config: c, guard: g, http: client, tokens: newTokenCache(client, c.Now)}
}
