package signature

import (
	"net/http"
	"time"
)

// HeaderStripeSignature carries Stripe's "t=<unix>,v1=<hex>[,v1=<hex>…]".
const HeaderStripeSignature = "Stripe-Signature"

var stripeFormat = timestampedFormat{
	header:       HeaderStripeSignature,
	entrySep:     ",",
	timestampKey: "t",
	signatureKey: "v1",
	contentSep:   ".",
}

// Stripe verifies Stripe webhook signatures: HMAC-SHA256, hex, of
// "<t>.<body>", keyed by the whole endpoint secret string ("whsec_…" is used
// as it is, not base64-decoded). Entries other than t and v1 (such as v0)
// are skipped; several v1 entries are accepted, as Stripe sends during a
// secret roll. Its EventLocation is the body's "id" (evt_…) and "type".
type Stripe struct{ timestampedVerifier }

// NewStripe returns a Stripe verifier with the endpoint's signing secrets
// and options (nil for the defaults; Stripe's own tolerance is also 5
// minutes).
func NewStripe(secrets SecretSource, opts *Options) *Stripe {
	return &Stripe{timestampedVerifier{
		secrets: secrets,
		opts:    opts,
		format:  stripeFormat,
		events:  EventLocation{IDField: "id", TypeField: "type"},
	}}
}

// SignStripe returns a header holding the Stripe-Signature for body signed
// at ts, with one v1 entry per secret, as Stripe sends it; for tests and for
// senders that imitate Stripe.
func SignStripe(secrets []string, ts time.Time, body []byte) (http.Header, error) {
	v, err := stripeFormat.sign(secrets, ts, body)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set(HeaderStripeSignature, v)
	return h, nil
}
