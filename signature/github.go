package signature

// GitHub webhook headers.
const (
	// HeaderGitHubSignature256 carries "sha256=<hex HMAC-SHA256 of the body>".
	HeaderGitHubSignature256 = "X-Hub-Signature-256"
	// HeaderGitHubDelivery carries the delivery's GUID, kept across
	// redeliveries.
	HeaderGitHubDelivery = "X-GitHub-Delivery"
	// HeaderGitHubEvent carries the event name (push, pull_request…).
	HeaderGitHubEvent = "X-GitHub-Event"
)

var githubConfig = HMACConfig{
	SignatureHeader: HeaderGitHubSignature256,
	Prefix:          "sha256=",
	Algorithm:       SHA256,
	Encoding:        Hex,
	Events:          EventLocation{IDHeader: HeaderGitHubDelivery, TypeHeader: HeaderGitHubEvent},
}

// NewGitHub returns a verifier for GitHub webhooks: X-Hub-Signature-256 is
// "sha256=" and the hex HMAC-SHA256 of the body, keyed by the webhook secret.
// GitHub signs no timestamp, so opts (nil for the defaults) has nothing to
// tune. The event id is X-GitHub-Delivery and the type X-GitHub-Event.
//
// X-Hub-Signature, the legacy "sha1=" HMAC-SHA1 that GitHub still sends
// beside X-Hub-Signature-256 for old receivers, is never read: every
// delivery carries X-Hub-Signature-256, so a request with only the SHA-1
// signature is refused (ErrMissingHeader) rather than verified with the
// weaker hash. A sender that signs only the SHA-1 header is configured with
// NewHMAC: HMACConfig{SignatureHeader: "X-Hub-Signature", Prefix: "sha1=",
// Algorithm: SHA1}.
func NewGitHub(secrets SecretSource, opts *Options) *HMAC {
	return mustHMAC(secrets, githubConfig, opts)
}
