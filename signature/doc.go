// Package signature signs and verifies webhook requests.
//
// Every scheme verifies over the raw request bytes, compares in constant
// time, accepts several secrets at once (rotation) and, where the scheme has a
// timestamp, rejects requests outside a tolerance (default 5 minutes both
// ways). Errors say which check failed — errors.Is matches ErrMissingHeader,
// ErrMalformedHeader, ErrStaleTimestamp, ErrNoMatch, or, for a problem on
// the receiving side, ErrNoSecrets or ErrInvalidOptions (ReceiverFault
// matches both) — and never contain a secret, an expected signature or a
// received one.
//
// Work before authentication is bounded. Before it parses a signature header
// or reads a secret, a verifier refuses, with ErrMalformedHeader, a header
// sent more than once, longer than [MaxSignatureHeaderBytes] or holding more
// than [MaxSignatureEntries] entries. A request then costs at most one MAC per
// secret (Twilio: two, its URL with and without a port), or, for Standard
// Webhooks v1a, one ed25519 verification per public key and entry. Secrets
// are the receiver's, not the sender's, so their number is not capped: keep
// it to the few a rotation needs.
//
// A [Verifier] checks a [Request] (method, URL, headers and raw body) against
// the secrets of a [SecretSource]: [Secrets] is a fixed list, newest first,
// and an application's own source can rotate them without a restart.
// [Options] set the tolerance and the clock. Presets cover the common
// providers: [NewStandardWebhooks] (v1 HMAC and v1a ed25519), [NewSvix],
// [NewStripe], [NewGitHub], [NewShopify], [NewSlack], [NewPaddle] and
// [NewTwilio]; [NewHMAC] configures the rest. Each preset also implements
// [EventLocator], naming where its provider puts the event id. Wharf's own
// outgoing webhooks are signed with [SignStandardWebhooks];
// [GenerateStandardSecret] and [GenerateStandardKeyPair] make new keys, and
// [SignStripe] imitates Stripe for tests.
//
// The package uses the standard library only. docs/signatures.md lists
// each scheme's headers and secrets; its section "Replay: what a signature
// does not cover" says what a valid signature still allows.
package signature
