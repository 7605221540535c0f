package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/wharfhq/wharf/internal/telemetry"
	"github.com/wharfhq/wharf/signature"
)

// UserAgent is sent with every delivery.
const UserAgent = "Wharf-Webhooks/1"

// newHTTPClient returns the client deliveries are sent with: every
// connection passes the SSRF guard, no proxy is used (a proxy would connect
// where the guard cannot see), redirects are returned, not followed, and
// response headers are bounded (HTTP/2's header list limit follows
// MaxResponseHeaderBytes) as the recorded body is.
func newHTTPClient(c *Config) *http.Client {
	dialer := guardDialer(c.Dialer, newSSRFGuard(c))
	transport := &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           512,
		MaxIdleConnsPerHost:    64,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: int64(c.ResponseHeaderLimit),
	}
	return &http.Client{
		Transport: transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
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
	url     string
	eventID string
	secrets []string
	body    []byte
	timeout time.Duration
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
	req.Header = header
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	telemetry.Inject(ctx, req.Header) // traceparent: the attempt's span

	start := time.Now()
	resp, err := o.http.Do(req)
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
	out.duration = time.Since(start)
	if err != nil {
		out.err = err
		var netErr net.Error
		out.timedOut = errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout())
	}
	return out
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
