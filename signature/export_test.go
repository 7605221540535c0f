package signature

// CountWork makes v, one of the package's verifiers, count the MACs and
// signature verifications it runs, and returns a function reading the
// count. Set it before v is shared.
func CountWork(v Verifier) func() int64 {
	c := &workCounter{}
	switch v := v.(type) {
	case *StandardWebhooks:
		v.work = c
	case *Stripe:
		v.work = c
	case *Paddle:
		v.work = c
	case *HMAC:
		v.work = c
	case *Twilio:
		v.work = c
	default:
		panic("CountWork: not one of the package's verifiers")
	}
	return c.n.Load
}
