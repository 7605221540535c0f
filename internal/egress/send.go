package egress

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
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"golang.org/x/oauth2"

	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/telemetry"
	"github.com/wharfhq/wharf/signature"
)

// UserAgent is sent with every delivery (outbox.UserAgent).
const UserAgent = "Wharf-Webhooks/1"

// Request is what Send needs of one attempt.
type Request struct {
	EndpointID uuid.UUID
	URL        string
	// EventID is the webhook-id.
	EventID string
	// Secrets sign the request: the current one and, during a rotation's
	// overlap, the previous one.
	Secrets []string
	// Headers are the endpoint's own.
	Headers http.Header
	// Auth is the endpoint's authentication, its credentials open.
	Auth    *outboxtype.Auth
	Body    []byte
	Timeout time.Duration
}

// Outcome is what one attempt learned.
type Outcome struct {
	// StatusCode is 0 when there was no response.
	StatusCode int
	// Body is the start of the response body (Config.ResponseBodyLimit);
	// Truncated is true when there was more.
	Body      []byte
	Truncated bool
	Duration  time.Duration
	// Err is the transport's error, or why nothing was sent.
	Err      error
	TimedOut bool
	// RetryAfter is the answer's Retry-After (429, 502, 503, 504), 0 for
	// none.
	RetryAfter time.Duration
	// CutOff is true when the client's stop cut the request short: no
	// verdict on the endpoint (MarkCutOff).
	CutOff bool
}

// errCutOff is the error of an attempt whose request the River client's
// stop cut short.
var errCutOff = errors.New("cut off by shutdown: the River client stopped while the request was in flight (the receiver may have got it)")

// MarkCutOff makes o the outcome of a request that the River client's
// stop cut short (its status code kept, if the answer had begun). It is an
// attempt, since the receiver may have got the request, but no verdict on
// the endpoint, whose health it leaves alone.
func (o *Outcome) MarkCutOff() {
	o.Err, o.CutOff, o.TimedOut = errCutOff, true, false
}

// Succeeded reports a 2xx answer.
func (o *Outcome) Succeeded() bool {
	return o.Err == nil && o.StatusCode >= 200 && o.StatusCode < 300
}

// Gone reports a 410 answer: the receiver asks never to be sent again.
func (o *Outcome) Gone() bool { return o.Err == nil && o.StatusCode == http.StatusGone }

// Refused reports that the SSRF guard refused the address: no transient
// failure, it is refused on every try.
func (o *Outcome) Refused() bool { return errors.Is(o.Err, ErrBlocked) }

// Failure describes a failed attempt without secrets, the URL (its query
// may hold a token) or the body; "" for a success.
func (o *Outcome) Failure() string {
	err := o.Err
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		err = urlErr.Err
	}
	switch {
	case err != nil && o.TimedOut:
		return "timed out: " + err.Error()
	case err != nil:
		return err.Error()
	case o.StatusCode >= 300 && o.StatusCode < 400:
		return fmt.Sprintf("answered %d (redirects are not followed)", o.StatusCode)
	case !o.Succeeded():
		return fmt.Sprintf("answered %d", o.StatusCode)
	}
	return ""
}

// Label is the outcome label of wharf_outbox_attempts_total: 2xx, 3xx,
// 4xx, 5xx, timeout, refused (the SSRF guard refused the address) or error
// (no answer: connection refused, reset, TLS…).
func (o *Outcome) Label() string {
	switch {
	case o.TimedOut:
		return "timeout"
	case o.Refused():
		return "refused"
	case o.Err != nil || o.StatusCode == 0:
		return "error"
	case o.StatusCode < 300:
		return "2xx"
	case o.StatusCode < 400:
		return "3xx"
	case o.StatusCode < 500:
		return "4xx"
	default:
		return "5xx"
	}
}

// Send makes one signed attempt. A fresh timestamp and signature are made
// for every attempt; the webhook-id is always the event id. ctx carries
// the attempt's span, whose trace context the request carries.
func (c *Client) Send(ctx context.Context, r *Request) *Outcome {
	out := &Outcome{}
	header, err := signature.SignStandardWebhooks(r.Secrets, r.EventID, c.config.Now(), r.Body)
	if err != nil {
		out.Err = fmt.Errorf("sign: %w", err)
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		out.Err = fmt.Errorf("build request: %w", err)
		return out
	}
	for name, values := range r.Headers {
		req.Header[name] = values // checked: none is one of those set below
	}
	maps.Copy(req.Header, header)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	telemetry.Inject(ctx, req.Header) // traceparent: the attempt's span

	start := time.Now()
	err = c.do(ctx, req, r, out)
	out.Duration = time.Since(start)
	if err != nil {
		out.Err = err
		var netErr net.Error
		out.TimedOut = errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout())
	}
	return out
}

// do authorizes and sends req, and reads the answer into out. A failure to
// fetch an OAuth 2.0 token fails the attempt like a failure to connect.
func (c *Client) do(ctx context.Context, req *http.Request, r *Request, out *Outcome) error {
	token, err := c.authorize(ctx, req, r.EndpointID, r.Auth)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err == nil && resp.StatusCode == http.StatusUnauthorized && token != nil {
		c.tokens.forget(r.EndpointID, token) // the next attempt fetches another
	}
	if err == nil {
		out.StatusCode = resp.StatusCode
		out.Body, out.Truncated, err = readLimited(resp.Body, c.config.ResponseBodyLimit)
		_ = resp.Body.Close()
		if retryAfterStatuses[resp.StatusCode] {
			out.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
		if err != nil && out.Succeeded() {
			// The receiver answered 2xx: a body cut short does not undo that.
			err = nil
		}
	}
	return err
}

// authorize sets the request's Authorization header from the endpoint's
// auth, fetching an OAuth 2.0 token when needed; it returns that token.
func (c *Client) authorize(ctx context.Context, req *http.Request, endpointID uuid.UUID, a *outboxtype.Auth) (*oauth2.Token, error) {
	switch a.Kind {
	case "":
		return nil, nil
	case outboxtype.AuthBearer:
		req.Header.Set("Authorization", "Bearer "+a.Token)
		return nil, nil
	case outboxtype.AuthBasic:
		req.SetBasicAuth(a.Username, a.Password)
		return nil, nil
	case outboxtype.AuthOAuth2ClientCredentials:
		tok, err := c.tokens.token(ctx, endpointID, a)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", tok.Type()+" "+tok.AccessToken)
		return tok, nil
	}
	return nil, fmt.Errorf("unknown auth kind %s", strings.ToValidUTF8(a.Kind, "?"))
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

// retryAfterStatuses are the answers whose Retry-After is honoured.
var retryAfterStatuses = map[int]bool{
	http.StatusTooManyRequests:    true,
	http.StatusBadGateway:         true,
	http.StatusServiceUnavailable: true,
	http.StatusGatewayTimeout:     true,
}

// parseRetryAfter reads a Retry-After header, in seconds or as an HTTP date,
// relative to now. Zero means absent or unusable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, int64(365*24*time.Hour/time.Second))) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return at.Sub(now)
	}
	return 0
}
