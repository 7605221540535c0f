package signature

// HeaderPaddleSignature carries Paddle Billing's "ts=<unix>;h1=<hex>".
const HeaderPaddleSignature = "Paddle-Signature"

// Paddle verifies Paddle Billing webhook signatures: HMAC-SHA256, hex, of
// "<ts>:<body>", keyed by the notification destination's secret string
// (pdl_ntfset_…) as it is. Several h1 entries are accepted; other entries
// are skipped. Its EventLocation is the body's "event_id" (evt_…) and
// "event_type".
type Paddle struct{ timestampedVerifier }

// NewPaddle returns a Paddle verifier with the destination's secrets and
// options (nil for the defaults). Paddle's SDKs allow only 5 seconds of
// skew; the default here is the package's 5 minutes, and Options.Tolerance
// tightens it.
func NewPaddle(secrets SecretSource, opts *Options) *Paddle {
	return &Paddle{timestampedVerifier{
		secrets: secrets,
		opts:    opts,
		format: timestampedFormat{
			header:       HeaderPaddleSignature,
			entrySep:     ";",
			timestampKey: "ts",
			signatureKey: "h1",
			contentSep:   ":",
		},
		events: EventLocation{IDField: "event_id", TypeField: "event_type"},
	}}
}
