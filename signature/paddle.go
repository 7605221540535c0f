package signature

import "context"

// HeaderPaddleSignature carries Paddle Billing's "ts=<unix>;h1=<hex>".
const HeaderPaddleSignature = "Paddle-Signature"

var paddleFormat = timestampedFormat{
	header:       HeaderPaddleSignature,
	entrySep:     ";",
	timestampKey: "ts",
	signatureKey: "h1",
	contentSep:   ":",
}

// Paddle verifies Paddle Billing webhook signatures: HMAC-SHA256, hex, of
// "<ts>:<body>", keyed by the notification destination's secret string
// (pdl_ntfset_…) as it is. Several h1 entries are accepted; other entries
// are skipped.
type Paddle struct {
	secrets SecretSource
	opts    *Options
}

// NewPaddle returns a Paddle verifier with the destination's secrets and
// options (nil for the defaults). Paddle's SDKs allow only 5 seconds of
// skew; the default here is the package's 5 minutes, and Options.Tolerance
// tightens it.
func NewPaddle(secrets SecretSource, opts *Options) *Paddle {
	return &Paddle{secrets: secrets, opts: opts}
}

// Verify checks r's Paddle-Signature. See the package documentation for
// errors.
func (p *Paddle) Verify(ctx context.Context, r *Request) error {
	return paddleFormat.verify(ctx, p.secrets, p.opts, r)
}

// EventLocation reports that the event id is the body's "event_id" (evt_…)
// and the type its "event_type".
func (p *Paddle) EventLocation() EventLocation {
	return EventLocation{IDField: "event_id", TypeField: "event_type"}
}
