package egress

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"time"
)

// The default transport's idle connections: a connection per request an
// endpoint may have in flight from this node (its cap, up to the queue's
// workers) stays open between requests. With 64 a host, 100 workers
// sending to an endpoint capped at 100 closed and dialled a connection for
// about one request in eight (1,049 connections for 15,000 deliveries,
// where the plain River sender beside them kept its 100).
const (
	maxIdleConnsPerHost = 256
	maxIdleConns        = 1024
)

// newHTTPClient returns the client deliveries and OAuth 2.0 token requests
// are sent with: every connection passes the SSRF guard g (or, with
// Config.Proxy, goes to the proxy alone), no proxy from the environment is
// ever used (a proxy would connect where the guard cannot see), redirects
// are returned, not followed, and response headers are bounded (HTTP/2's
// header list limit follows MaxResponseHeaderBytes) as the recorded body
// is. Config.Transport, when set, is the template of the transport;
// Config.WrapTransport wraps it.
func newHTTPClient(c *Config, g *guard) *http.Client {
	var transport *http.Transport
	if c.Transport != nil {
		transport = c.Transport.Clone()
	} else {
		transport = &http.Transport{
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          maxIdleConns,
			MaxIdleConnsPerHost:   maxIdleConnsPerHost,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
	}
	transport.MaxResponseHeaderBytes = int64(c.ResponseHeaderLimit)
	transport.Proxy = nil
	transport.DialContext = guardDialer(c.Dialer, g).DialContext
	var rt http.RoundTripper = transport
	if c.Proxy != nil {
		proxy := *c.Proxy
		transport.Proxy = http.ProxyURL(&proxy)
		transport.DialContext = proxyOnlyDialer(c.Dialer, &proxy)
		rt = &literalGuard{guard: g, next: transport}
	}
	if c.WrapTransport != nil {
		rt = c.WrapTransport(rt)
	}
	return &http.Client{
		Transport: rt,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// proxyOnlyDialer dials with d, but only the proxy's address: through a
// proxy, every connection the transport makes is to the proxy.
func proxyOnlyDialer(d *net.Dialer, proxy *url.URL) func(ctx context.Context, network, address string) (net.Conn, error) {
	want := proxyAddress(proxy)
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		if address != want {
			return nil, &Refusal{Reason: "not Config.Proxy, through which every connection goes"}
		}
		return d.DialContext(ctx, network, address)
	}
}

// proxyAddress is the host:port the transport dials for proxy.
func proxyAddress(proxy *url.URL) string {
	port := proxy.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443", "socks5": "1080", "socks5h": "1080"}[proxy.Scheme]
	}
	return net.JoinHostPort(proxy.Hostname(), port)
}

// literalGuard refuses, through a proxy, requests to a URL whose host is a
// refused IP address or localhost: the proxy resolves host names, where
// the guard cannot see, but a literal address needs no resolving.
type literalGuard struct {
	guard *guard
	next  http.RoundTripper
}

func (l *literalGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := l.guard.literal(req.URL.String()); err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	return l.next.RoundTrip(req)
}
