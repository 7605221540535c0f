package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/google/uuid"

	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/telemetry"
	"github.com/wharfhq/wharf/signature"
)

// UserAgent is sent with every delivery.
const UserAgent = "Wharf-Webhooks/1"

// newHTTPClient returns the client deliveries and OAuth 2.0 token requests
// are sent with: every connection passes the SSRF guard (or, with
// Config.Proxy, goes to the proxy alone), no proxy from the environment is
// ever used (a proxy would connect where the guard cannot see), redirects
// are returned, not followed, and response headers are bounded (HTTP/2's
// header list limit follows MaxResponseHeaderBytes) as the recorded body
// is. Config.Transport, when set, is the template of the transport;
// Config.WrapTransport wraps it.
func newHTTPClient(c *Config) *http.Client {
	guard := newSSRFGuard(c)
	var transport *http.Transport
	if c.Transport != nil {
		transport = c.Transport.Clone()
	} else {
		transport = &http.Transport{
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          512,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
	}
	transport.MaxResponseHeaderBytes = int64(c.ResponseHeaderLimit)
	transport.Proxy = nil
	transport.DialContext = guardDialer(c.Dialer, guard).DialContext
	var rt http.RoundTripper = transport
	if c.Proxy != nil {
		transport.Proxy = http.ProxyURL(c.Proxy)
		transport.DialContext = proxyOnlyDialer(c.Dialer, c.Proxy)
		rt = &literalGuard{guard: guard, next: transport}
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
			return nil, &BlockedAddressError{Reason: "not Config.Proxy, through which every connection goes"}
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
	guard *ssrfGuard
	next  http.RoundTripper
}

func (l *literalGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := l.guard.literalBlocked(req.URL.String()); err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	return l.next.RoundTrip(req)
}

// sendOutcome is what one attempt learned.
type sendOutcome struct {
	statusCode int // 0 when there was no response
	body       []byte
	truncated  bool
	duration   time.Duration
	err        error // transport error, or why nothing was sent
	timedOut   bool
	retryAfter time.Duration
	cancelled  bool // River cancelled the job during the attempt: it is the last
	cutOff     bool // the client's stop cut the request short: no verdict on the endpoint
}

// errCutOff is the error of an attempt whose request the River client's
// stop cut short.
var errCutOff = errors.New("cut off by shutdown: the River client stopped while the request was in flight (the receiver may have got it)")

// markCutOff makes s the outcome of a request that the River client's
// stop cut short (its status code kept, if the answer had begun). It is an
// attempt, since the receiver may have got the request, but no verdict on
// the endpoint, whose health it leaves alone.
func (s *sendOutcome) markCutOff() {
	s.err, s.cutOff, s.timedOut = errCutOff, true, false
}

func (s *sendOutcome) succeeded() bool {
	return s.err == nil && s.statusCode >= 200 && s.statusCode < 300
}

// gone reports a 410 answer: the receiver asks never to be sent again.
func (s *sendOutcome) gone() bool { return s.err == nil && s.statusCode == http.StatusGone }

// errorText describes a failed attempt without secrets, the URL (its query
// may hold a token) or the body.
func (s *sendOutcome) errorText() string {
	text := s.failure()
	if s.cancelled && text != "" {
		return reasonCancelled + "; the attempt: " + text
	}
	return text
}

func (s *sendOutcome) failure() string {
	err := s.err
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		err = urlErr.Err
	}
	switch {
	case err != nil && s.timedOut:
		return "timed out: " + err.Error()
	case err != nil:
		return err.Error()
	case s.statusCode >= 300 && s.statusCode < 400:
		return fmt.Sprintf("answered %d (redirects are not followed)", s.statusCode)
	case !s.succeeded():
		return fmt.Sprintf("answered %d", s.statusCode)
	}
	return ""
}

// delivery is what send needs of one attempt.
type delivery struct {
	endpointID uuid.UUID
	url        string
	eventID    string
	secrets    []string
	headers    http.Header
	auth       *outboxtype.Auth
	body       []byte
	timeout    time.Duration
}

// send makes one signed attempt. A fresh timestamp and signature are made
// for every attempt; the webhook-id is always the event id.
func (o *Outbox) send(ctx context.Context, d *delivery) *sendOutcome {
	out := &sendOutcome{}
	header, err := signature.SignStandardWebhooks(d.secrets, d.eventID, o.config.Now(), d.body)
	if err != nil {
		out.err = fmt.Errorf("sign: %w", err)
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(d.body))
	if err != nil {
		out.err = fmt.Errorf("build request: %w", err)
		return out
	}
	for name, values := range d.headers {
		req.Header[name] = values // checked: none is one of those set below
	}
	maps.Copy(req.Header, header)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	telemetry.Inject(ctx, req.Header) // traceparent: the attempt's span

	start := time.Now()
	err = o.do(ctx, req, d, out)
	out.duration = time.Since(start)
	if err != nil {
		out.err = err
		var netErr net.Error
		out.timedOut = errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout())
	}
	return out
}

// do authorizes and sends req, and reads the answer into out. A failure to
// fetch an OAuth 2.0 token fails the attempt like a failure to connect.
func (o *Outbox) do(ctx context.Context, req *http.Request, d *delivery, out *sendOutcome) error {
	token, err := o.authorize(ctx, req, d.endpointID, d.auth)
	if err != nil {
		return err
	}
	resp, err := o.http.Do(req)
	if err == nil && resp.StatusCode == http.StatusUnauthorized && token != nil {
		o.tokens.forget(d.endpointID, token) // the next attempt fetches another
	}
	if err == nil {
		out.statusCode = resp.StatusCode
		out.body, out.truncated, err = readLimited(resp.Body, o.config.ResponseBodyLimit)
		_ = resp.Body.Close()
		if retryAfterStatuses[resp.StatusCode] {
			out.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
		if err != nil && out.succeeded() {
			// The receiver answered 2xx: a body cut short does not undo that.
			err = nil
		}
	}
	return err
}

// readLimited reads up to limit bytes of r (none when limit < 0) and
// reports whether more was left.
func readLimited(r io.Reader, limit int) ([]byte, bool, error) {
	if limit < 0 {
		limit = 0
	}
	body, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if len(body) > limit {
		return body[:limit], true, err
	}
	return body, false, err
}
