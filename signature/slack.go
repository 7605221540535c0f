package signature

// Slack request-signing headers.
const (
	// HeaderSlackSignature carries "v0=<hex HMAC-SHA256>".
	HeaderSlackSignature = "X-Slack-Signature"
	// HeaderSlackTimestamp carries the signing time in unix seconds.
	HeaderSlackTimestamp = "X-Slack-Request-Timestamp"
)

var slackConfig = HMACConfig{
	SignatureHeader: HeaderSlackSignature,
	Prefix:          "v0=",
	Algorithm:       SHA256,
	Encoding:        Hex,
	TimestampHeader: HeaderSlackTimestamp,
	Template:        "v0:{timestamp}:{body}",
	Events:          EventLocation{IDField: "event_id", TypeField: "event.type"},
}

// NewSlack returns a verifier for Slack's signed requests (Events API and
// interactivity): X-Slack-Signature is "v0=" and the hex HMAC-SHA256 of
// "v0:<timestamp>:<body>", keyed by the app's signing secret, with the
// timestamp from X-Slack-Request-Timestamp held to opts.Tolerance (nil opts:
// 5 minutes, as Slack recommends). The event id is the body's "event_id" and
// the type its "event.type".
func NewSlack(secrets SecretSource, opts *Options) *HMAC {
	return mustHMAC(secrets, slackConfig, opts)
}
