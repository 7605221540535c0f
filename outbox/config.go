package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/google/uuid"

	"github.com/wharfhq/wharf/internal/admission"
	"github.com/wharfhq/wharf/internal/delivery"
	"github.com/wharfhq/wharf/internal/egress"
	"github.com/wharfhq/wharf/internal/secretbox"
	"github.com/wharfhq/wharf/internal/shared"
)

// DefaultQueue is the River queue delivery jobs go to unless Config.Queue
// says otherwise.
const DefaultQueue = delivery.DefaultQueue

// DefaultRetrySchedule is the wait before each delivery attempt: the first
// is immediate, the eighth comes about 28 hours after the first. After the
// last attempt fails the delivery is dead-lettered.
var DefaultRetrySchedule = delivery.DefaultRetrySchedule

// Defaults of the Config fields that have one (the engines' own, which
// apply them when they are built alone).
const (
	DefaultMaxPayloadBytes           = 256 << 10
	DefaultResponseBodyLimit         = egress.DefaultResponseBodyLimit
	DefaultResponseHeaderLimit       = egress.DefaultResponseHeaderLimit
	DefaultEndpointTimeout           = 15 * time.Second
	DefaultMaxEndpointTimeout        = delivery.DefaultMaxEndpointTimeout
	DefaultMaxInFlight               = 10
	DefaultDeliveryBatchSize         = delivery.DefaultDeliveryBatchSize
	DefaultDeliveryBatchSpan         = delivery.DefaultDeliveryBatchSpan
	DefaultBusyRetryDelay            = admission.DefaultBusyRetryDelay
	DefaultRetryJitter               = delivery.DefaultRetryJitter
	DefaultThrottledRetryMin         = delivery.DefaultThrottledRetryMin
	DefaultRetryAfterMax             = delivery.DefaultRetryAfterMax
	DefaultSecretRotationOverlap     = 24 * time.Hour
	DefaultDisableAfter              = delivery.DefaultDisableAfter
	DefaultCircuitBreakerThreshold   = delivery.DefaultCircuitThreshold
	DefaultCircuitBreakerCooldown    = admission.DefaultCircuitBreakerCooldown
	DefaultCircuitBreakerMaxCooldown = admission.DefaultCircuitBreakerMaxCooldown
)

// maxRetryScheduleLen bounds the schedule, so a typo cannot make a delivery
// retry for ever.
const maxRetryScheduleLen = 100

// maxDeliveryBatchSize bounds Config.DeliveryBatchSize: a batch job's args
// hold its deliveries' ids.
const maxDeliveryBatchSize = 1000

// maxDeliveryBatchSpan bounds Config.DeliveryBatchSpan: a batch job's
// River timeout and its concurrency slot's lease include it.
const maxDeliveryBatchSpan = time.Minute

// maxEndpointTimeout bounds an endpoint's timeout: a delivery holds a River
// worker and a concurrency slot for that long.
const maxEndpointTimeout = 5 * time.Minute

// ErrInvalidConfig is returned by New for a Config it cannot use.
var ErrInvalidConfig = errors.New("outbox: invalid config")

// Config configures an Outbox. A nil *Config means every default.
type Config struct {
	// Catalog lists the event types the application publishes, with the
	// schema each event's data must match: PublishTx refuses data that
	// fails it (EventDataError), inside the transaction. Defaults to none:
	// any type, any data.
	Catalog *Catalog
	// Queue is the River queue delivery jobs are inserted into. The River
	// client that works them must list it in its Queues.
	//
	// Defaults to DefaultQueue ("wharf_outbox").
	Queue string

	// RetrySchedule is the wait before each attempt: its length is the
	// number of attempts. The first entry is the wait between PublishTx
	// and the first attempt, normally 0 (deliver at once; it is not
	// jittered, and replays are always sent at once); each later one is the
	// wait after a failed attempt. After the last attempt fails the
	// delivery is dead.
	//
	// Deliveries already queued keep at most the number of attempts their
	// jobs were inserted for (plus two, when the schedule grew): River's
	// MaxAttempts is fixed at insert.
	//
	// Defaults to DefaultRetrySchedule (0, 5s, 5m, 30m, 2h, 5h, 10h, 10h).
	RetrySchedule []time.Duration

	// RetryJitter spreads each retry wait by up to this fraction either way,
	// so failures that happened together do not retry together.
	//
	// Defaults to DefaultRetryJitter (0.2, ±20%). -1 disables jitter.
	RetryJitter float64

	// ThrottledRetryMin is the least wait after an attempt that timed out or
	// was answered 429 Too Many Requests, whatever the schedule says.
	//
	// Defaults to DefaultThrottledRetryMin (1 minute). -1 disables it.
	ThrottledRetryMin time.Duration

	// RetryAfterMax caps how long a Retry-After header (honoured on 429,
	// 502, 503 and 504) can make a retry wait.
	//
	// Defaults to DefaultRetryAfterMax (1 hour). -1 ignores Retry-After.
	RetryAfterMax time.Duration

	// BusyRetryDelay is how long a delivery waits (snoozed, without using an
	// attempt) when, for an ordered endpoint, an earlier delivery with its
	// ordering key is unfinished, or when another delivery probes its
	// endpoint's half-open circuit. It is also the first wait when the
	// endpoint already has MaxInFlight requests in flight and none came
	// free within 100 ms in this process (the delivery waits that long in
	// its worker first, as one of at most four per endpoint), doubling with
	// each snooze of the delivery up to a minute (a rate-limited
	// endpoint's delivery waits for its turn for a token instead, at least
	// this long), and the first wait after a transient database error,
	// doubling up to 10 seconds. Up to 25% jitter is added to each.
	//
	// Defaults to DefaultBusyRetryDelay (1 second).
	BusyRetryDelay time.Duration

	// MaxPayloadBytes is the largest request body PublishTx accepts: the
	// encoded Standard Webhooks envelope {"type", "timestamp", "data"}.
	//
	// Defaults to DefaultMaxPayloadBytes (256 KiB).
	MaxPayloadBytes int

	// ResponseBodyLimit is how much of each response body is recorded with
	// its attempt; the rest is discarded.
	//
	// Defaults to DefaultResponseBodyLimit (16 KiB). -1 records none.
	ResponseBodyLimit int

	// ResponseHeaderLimit bounds the response headers (status line and
	// every header, 1xx responses included) a delivery reads: an endpoint
	// that sends more fails the attempt ("server response headers exceeded
	// … bytes"), like any other failure. It bounds the memory a response can
	// take (Go's own default allows 10 MiB of headers, which parse into
	// several times that); nginx and most proxies send at most 4 to 8 KiB.
	//
	// Defaults to DefaultResponseHeaderLimit (16 KiB).
	ResponseHeaderLimit int

	// EndpointTimeout is the request timeout of endpoints created without
	// one, at most MaxEndpointTimeout.
	//
	// Defaults to DefaultEndpointTimeout (15 seconds).
	EndpointTimeout time.Duration

	// MaxEndpointTimeout is the longest request timeout an endpoint may
	// have (EndpointCreate and EndpointUpdate refuse more). Delivery jobs
	// carry a River timeout of this plus 50 s (batch jobs: plus four
	// DeliveryBatchSpans too), whatever the client's
	// JobTimeout, so River never cuts a request short; River's rescuer
	// retries a delivery whose process died once its job is that old, so a
	// lower limit means faster recovery from a crash. At most 5 minutes.
	//
	// Defaults to DefaultMaxEndpointTimeout (1 minute).
	MaxEndpointTimeout time.Duration

	// MaxInFlight is the concurrency cap of endpoints created without one:
	// how many requests may be in flight to the endpoint at once.
	//
	// Defaults to DefaultMaxInFlight (10).
	MaxInFlight int

	// DeliveryBatchSize is the most deliveries to one endpoint, published
	// together (one PublishManyTx, one DeliveryReplayDead, one
	// EndpointRecover batch), one River job attempts first, one after
	// another (see DeliveryBatchArgs). A job per delivery costs River's
	// fetch and completion of each, which outweighs a fast endpoint's
	// request. The deliveries are spread over as many jobs as the
	// endpoint's MaxInFlight lets run at once (no cap counts as 1,000), but
	// no more than one job per 16 of them (or per DeliveryBatchSize, if
	// smaller), so that an endpoint that takes a while to answer gets the
	// requests in flight it allows. Deliveries with an ordering key, and
	// those to a rate limited endpoint, get a job each. 1 gives every
	// delivery a job of its own (batch jobs already queued, or split by
	// DeliveryBatchSpan, then hand their deliveries over to jobs of their
	// own).
	//
	// Upgrading from a release without batch jobs: deploy it with 1 to
	// every node working the queue, then raise it. A node without the batch
	// worker fails each batch job it fetches, using one of the job's runs
	// (River retries it after a growing backoff); a batch job whose runs
	// all fail that way is discarded, and its deliveries wait for Rescue
	// (the outbox's periodic job) to give them jobs of their own.
	//
	// Defaults to DefaultDeliveryBatchSize (64).
	DeliveryBatchSize int

	// DeliveryBatchSpan is how long a batch job sends, one delivery after
	// another, before it splits the deliveries it has not reached among new
	// jobs, as many to a job as it sent in the span (a job of its own each
	// when it sent one), which other workers run at once: a batch to a fast
	// endpoint stays one job, and one to a slow endpoint fans out, so that
	// its last delivery waits about this long plus a few requests, not for
	// the sum of its requests. For an endpoint with a cap (MaxInFlight)
	// the split makes no more jobs than it has slots free, counting the one
	// the job gives back. When every other slot is held, or the rest is no
	// more than the job sent in the span, new jobs would not be faster, so
	// the job goes on sending instead, for up to four spans in all while
	// its River timeout leaves room (never with DeliveryBatchSize 1). A
	// batch job's River timeout is four times this plus MaxEndpointTimeout
	// plus 50 s; River's rescuer reads it on the leader, so set the same
	// span on every node working the queue, and upgrade the leader first.
	// At most a minute.
	//
	// Defaults to DefaultDeliveryBatchSpan (1s).
	DeliveryBatchSpan time.Duration

	// SecretRotationOverlap is how long the previous secret keeps being used
	// (both signatures are sent) after EndpointRotateSecret, unless the call
	// says otherwise.
	//
	// Defaults to DefaultSecretRotationOverlap (24 hours).
	SecretRotationOverlap time.Duration

	// SecretKeys encrypts endpoint secrets at rest: signing secrets and Auth
	// credentials are stored sealed with AES-256-GCM under SecretKeys[0],
	// the current key, and read with whichever key of the ring the stored
	// value names ("wharfenc:v1:<ID>:…"). A stored value is bound to its
	// endpoint, so one copied to another row fails to decrypt
	// (ErrSecretDecrypt). Rows stored in plaintext (before the ring was
	// configured) are still read; ReencryptSecrets seals them, and moves
	// rows sealed with an older key to the current one. To rotate without
	// downtime: add the new key after the current one on every node, then
	// put it first on every node, run ReencryptSecrets, and drop the old
	// key. Duplicate IDs, IDs that are not 1 to 64 letters, digits, '.',
	// '_' or '-', and keys that are not 32 bytes are refused
	// (ErrInvalidConfig). ParseSecretKeys reads a ring from text.
	//
	// Defaults to none: secrets are stored in plaintext, as before (a
	// sealed value then fails with ErrSecretDecrypt).
	SecretKeys []SecretKey

	// DisableAfter disables an endpoint whose attempts have all failed for
	// this long (any success resets the clock).
	//
	// Defaults to DefaultDisableAfter (5 days). -1 never disables an
	// endpoint for failing (a 410 Gone answer still does).
	DisableAfter time.Duration

	// CircuitBreakerThreshold is how many consecutive failed attempts to an
	// endpoint (any failure: an answer other than 2xx, a timeout, no
	// answer) open its circuit: its deliveries then wait, snoozed without
	// using an attempt, for CircuitBreakerCooldown; then one delivery at a
	// time, across every process, probes the endpoint. The probe's success
	// closes the circuit; its failure opens it again, for twice the last
	// cool-down, up to CircuitBreakerMaxCooldown. Endpoint.CircuitState
	// shows it; EndpointEnable closes it. DisableAfter and 410 Gone still
	// disable an endpoint (its probes keep failing for DisableAfter).
	//
	// Defaults to DefaultCircuitBreakerThreshold (10). -1 disables the
	// breaker: deliveries go whatever the circuit says.
	CircuitBreakerThreshold int

	// CircuitBreakerCooldown is how long an endpoint's circuit stays open
	// when it first opens.
	//
	// Defaults to DefaultCircuitBreakerCooldown (30 seconds).
	CircuitBreakerCooldown time.Duration

	// CircuitBreakerMaxCooldown caps the cool-down, which doubles each time
	// a probe fails.
	//
	// Defaults to DefaultCircuitBreakerMaxCooldown (10 minutes), or
	// CircuitBreakerCooldown when that is longer.
	CircuitBreakerMaxCooldown time.Duration

	// AllowPrivateNetworks lets deliveries reach loopback, private (RFC 1918),
	// shared (RFC 6598), link-local and unique-local addresses. Cloud
	// metadata addresses stay refused unless listed in AllowedNetworks.
	// Meant for development and self-hosted setups.
	//
	// Defaults to false.
	AllowPrivateNetworks bool

	// AllowedNetworks lists networks deliveries may reach although the SSRF
	// guard would refuse them, such as an internal service's subnet.
	//
	// Defaults to none.
	AllowedNetworks []netip.Prefix

	// Dialer dials endpoint connections. Its Control function, if any, runs
	// after the SSRF guard has accepted the address.
	//
	// Defaults to a net.Dialer with a 10 second connect timeout.
	Dialer *net.Dialer

	// Transport is the template of the transport deliveries and OAuth 2.0
	// token requests are sent with: its TLS settings (TLSClientConfig with
	// client certificates for mutual TLS, or a private root CA), HTTP/2
	// switch, connection pool and timeouts are kept. The outbox sends with
	// a clone of it whose connections are dialed by Dialer through the SSRF
	// guard (its own DialContext and Dial are replaced: tune dialing with
	// Dialer), whose Proxy is Config.Proxy (the clone never reads
	// HTTP_PROXY, HTTPS_PROXY or NO_PROXY, even when the template's Proxy
	// is http.ProxyFromEnvironment, as http.DefaultTransport's is), and
	// whose MaxResponseHeaderBytes is ResponseHeaderLimit. A template with
	// DialTLSContext or DialTLS set is refused (ErrInvalidConfig): those
	// would connect where the guard cannot see; use TLSClientConfig.
	//
	// Defaults to a transport with HTTP/2, up to 1,024 idle connections
	// (256 per host, so that one stays open for each request an endpoint
	// has in flight) kept for 90 seconds and a 10 second TLS handshake
	// timeout.
	Transport *http.Transport

	// WrapTransport wraps the transport (after Transport's clone is made):
	// a hook for client middleware such as tracing or metrics
	// (otelhttp.NewTransport, for one). The wrapper must send every request
	// through the RoundTripper it is given, which is where the SSRF guard
	// works; requests carry the endpoint's credentials (Authorization), so
	// it must not log their headers. It is called once, by New.
	//
	// Defaults to none.
	WrapTransport func(http.RoundTripper) http.RoundTripper

	// Proxy is an egress proxy (http, https or socks5 URL, credentials in
	// its user info) every delivery and OAuth 2.0 token request goes
	// through. The outbox then connects to the proxy only (its address is
	// not judged by the SSRF guard: you chose it), and refuses requests to
	// endpoint URLs whose host is an IP address or localhost name the guard
	// refuses; but the proxy, not the outbox, resolves host names, so the
	// proxy must refuse internal destinations itself. The environment's
	// HTTP_PROXY and HTTPS_PROXY are never used.
	//
	// Defaults to none: deliveries connect directly, every address checked
	// by the SSRF guard.
	Proxy *url.URL

	// Logger receives the outbox's logs. Secrets and bodies are never logged.
	// A failed attempt is one line (info while it will be retried, warn
	// once dead); a delivered one is logged at debug only: give a logger
	// enabled for slog.LevelDebug for a line per delivery.
	//
	// Defaults to slog.Default().
	Logger *slog.Logger

	// TracerProvider receives the outbox's spans: wharf.outbox.publish in
	// the publishing transaction's context, and wharf.outbox.deliver for
	// each attempt, a child of the publishing span (whose trace context is
	// stored with the event when sampled), which the request carries to the
	// endpoint as a traceparent header.
	//
	// Defaults to the global TracerProvider.
	TracerProvider trace.TracerProvider

	// OnDead is called once for each delivery a worker made dead (attempts
	// exhausted, 410 Gone, its endpoint disabled, its event gone, its job
	// cancelled while it ran), after the statement that recorded it, with
	// the reason: an alert hook. It runs on the worker's goroutine, so keep
	// it short; a panic in it is recovered and logged.
	//
	// Defaults to none.
	OnDead func(ctx context.Context, d DeadDelivery)

	// OnEndpointDisabled is called once when an attempt disables its
	// endpoint (410 Gone, or failing for DisableAfter), after the
	// statement that disabled it; as OnDead otherwise.
	//
	// Defaults to none.
	OnEndpointDisabled func(ctx context.Context, e DisabledEndpoint)

	// MeterProvider receives the outbox's metrics (wharf_outbox_…, listed
	// in docs/operations.md, "Metrics and traces"); the database gauges query
	// Postgres only when collected.
	//
	// Defaults to the global MeterProvider (a no-op until the application
	// installs an OpenTelemetry SDK).
	MeterProvider metric.MeterProvider

	// Now returns the current time; tests set it to control the clock. It
	// stamps events, deliveries, attempts and endpoint health; concurrency
	// leases, rate limit tokens and circuit cool-downs use the database's
	// clock instead, so that nodes whose clocks disagree agree on them.
	//
	// Defaults to time.Now.
	Now func() time.Time
}

// withDefaults validates c and returns a copy with every default filled in,
// with cmp.Or as each engine's New fills its own (the defaults the engines
// share are theirs, re-exported above).
func (c *Config) withDefaults() (*Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	out.Queue = cmp.Or(out.Queue, DefaultQueue)
	if out.RetrySchedule == nil {
		out.RetrySchedule = DefaultRetrySchedule
	}
	out.RetrySchedule = slices.Clone(out.RetrySchedule)
	out.RetryJitter = cmp.Or(out.RetryJitter, DefaultRetryJitter)
	out.ThrottledRetryMin = cmp.Or(out.ThrottledRetryMin, DefaultThrottledRetryMin)
	out.RetryAfterMax = cmp.Or(out.RetryAfterMax, DefaultRetryAfterMax)
	out.BusyRetryDelay = cmp.Or(out.BusyRetryDelay, DefaultBusyRetryDelay)
	out.MaxPayloadBytes = cmp.Or(out.MaxPayloadBytes, DefaultMaxPayloadBytes)
	out.ResponseBodyLimit = cmp.Or(out.ResponseBodyLimit, DefaultResponseBodyLimit)
	out.ResponseHeaderLimit = cmp.Or(out.ResponseHeaderLimit, DefaultResponseHeaderLimit)
	out.EndpointTimeout = cmp.Or(out.EndpointTimeout, DefaultEndpointTimeout)
	out.MaxEndpointTimeout = cmp.Or(out.MaxEndpointTimeout, DefaultMaxEndpointTimeout)
	out.MaxInFlight = cmp.Or(out.MaxInFlight, DefaultMaxInFlight)
	out.DeliveryBatchSize = cmp.Or(out.DeliveryBatchSize, DefaultDeliveryBatchSize)
	out.DeliveryBatchSpan = cmp.Or(out.DeliveryBatchSpan, DefaultDeliveryBatchSpan)
	out.SecretRotationOverlap = cmp.Or(out.SecretRotationOverlap, DefaultSecretRotationOverlap)
	out.DisableAfter = cmp.Or(out.DisableAfter, DefaultDisableAfter)
	out.CircuitBreakerThreshold = cmp.Or(out.CircuitBreakerThreshold, DefaultCircuitBreakerThreshold)
	out.CircuitBreakerCooldown = cmp.Or(out.CircuitBreakerCooldown, DefaultCircuitBreakerCooldown)
	out.CircuitBreakerMaxCooldown = cmp.Or(out.CircuitBreakerMaxCooldown, max(DefaultCircuitBreakerMaxCooldown, out.CircuitBreakerCooldown))
	out.Logger = cmp.Or(out.Logger, slog.Default())
	if out.Now == nil {
		out.Now = time.Now
	}
	if err := out.validate(); err != nil {
		return nil, err
	}
	return &out, nil
}

// validate checks a Config whose defaults are filled in.
func (c *Config) validate() error {
	p := shared.NewProblems(ErrInvalidConfig)
	bad := p.Addf
	if len(c.Queue) > 128 {
		bad("Queue is longer than 128 characters")
	}
	if len(c.RetrySchedule) == 0 || len(c.RetrySchedule) > maxRetryScheduleLen {
		bad("RetrySchedule needs 1 to %d entries, has %d", maxRetryScheduleLen, len(c.RetrySchedule))
	}
	for i, d := range c.RetrySchedule {
		if d < 0 {
			bad("RetrySchedule[%d] is negative", i)
		}
	}
	if c.RetryJitter != -1 && (c.RetryJitter < 0 || c.RetryJitter >= 1) {
		bad("RetryJitter must be in [0, 1) or -1")
	}
	if c.ThrottledRetryMin < -1 {
		bad("ThrottledRetryMin must not be negative (-1 disables it)")
	}
	if c.RetryAfterMax < -1 {
		bad("RetryAfterMax must not be negative (-1 ignores Retry-After)")
	}
	if c.BusyRetryDelay < 0 {
		bad("BusyRetryDelay must not be negative")
	}
	if c.MaxPayloadBytes < 0 {
		bad("MaxPayloadBytes must not be negative")
	}
	if c.ResponseBodyLimit < -1 {
		bad("ResponseBodyLimit must not be negative (-1 records none)")
	}
	if c.ResponseHeaderLimit < 0 {
		bad("ResponseHeaderLimit must not be negative")
	}
	if err := checkTimeout(c.MaxEndpointTimeout, maxEndpointTimeout); err != nil {
		bad("MaxEndpointTimeout: %v", err)
	} else if err := checkTimeout(c.EndpointTimeout, c.MaxEndpointTimeout); err != nil {
		bad("EndpointTimeout: %v (MaxEndpointTimeout)", err)
	}
	if c.MaxInFlight < 0 {
		bad("MaxInFlight must not be negative")
	}
	if c.DeliveryBatchSize < 1 || c.DeliveryBatchSize > maxDeliveryBatchSize {
		bad("DeliveryBatchSize must be in [1, %d], is %d", maxDeliveryBatchSize, c.DeliveryBatchSize)
	}
	if c.DeliveryBatchSpan < 0 || c.DeliveryBatchSpan > maxDeliveryBatchSpan {
		bad("DeliveryBatchSpan must be in [0, %v], is %v", maxDeliveryBatchSpan, c.DeliveryBatchSpan)
	}
	if c.SecretRotationOverlap < 0 {
		bad("SecretRotationOverlap must not be negative")
	}
	secretbox.CheckKeys(ringKeys(c.SecretKeys), bad)
	if c.DisableAfter < -1 {
		bad("DisableAfter must not be negative (-1 never disables)")
	}
	if c.CircuitBreakerThreshold < -1 {
		bad("CircuitBreakerThreshold must not be negative (-1 disables the breaker)")
	}
	if c.CircuitBreakerCooldown < 0 {
		bad("CircuitBreakerCooldown must not be negative")
	}
	if c.CircuitBreakerMaxCooldown < c.CircuitBreakerCooldown {
		bad("CircuitBreakerMaxCooldown must not be shorter than CircuitBreakerCooldown")
	}
	for i, p := range c.AllowedNetworks {
		if !p.IsValid() {
			bad("AllowedNetworks[%d] is not a valid prefix", i)
		}
	}
	if t := c.Transport; t != nil && (t.DialTLSContext != nil || t.DialTLS != nil) { //nolint:staticcheck // DialTLS is deprecated, not gone
		bad("Transport must not set DialTLSContext or DialTLS: they would bypass the SSRF guard; set TLSClientConfig instead")
	}
	if c.Proxy != nil {
		switch {
		case c.Proxy.Scheme != "http" && c.Proxy.Scheme != "https" && c.Proxy.Scheme != "socks5" && c.Proxy.Scheme != "socks5h":
			bad("Proxy scheme must be http, https or socks5")
		case c.Proxy.Hostname() == "":
			bad("Proxy has no host")
		}
	}
	return p.Err()
}

func checkTimeout(d, limit time.Duration) error {
	if d <= 0 || d > limit {
		return fmt.Errorf("must be in (0, %s], is %s", limit, d)
	}
	return nil
}

// now returns the configured clock's time in UTC at Postgres' precision.
func (c *Config) now() time.Time { return shared.Micro(c.Now()) }

// DeadDelivery is what Config.OnDead learns of a delivery that died.
type DeadDelivery struct {
	DeliveryID uuid.UUID
	EndpointID uuid.UUID
	EventID    string
	// Reason is the delivery's last error: the last attempt's failure, or
	// why no attempt was made.
	Reason string
}

// DisabledEndpoint is what Config.OnEndpointDisabled learns of an endpoint
// an attempt disabled.
type DisabledEndpoint struct {
	EndpointID uuid.UUID
	Reason     string
}
