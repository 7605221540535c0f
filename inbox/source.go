package inbox

import (
	"fmt"
	"slices"

	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/shared"
	"github.com/wharfhq/wharf/signature"
)

// MismatchPolicy says how the HTTP handler answers a delivery that reuses an
// event id with a different payload. Either way the mismatch is counted on
// the key and logged at warn, and the second payload is not processed.
type MismatchPolicy int

const (
	// MismatchDuplicate answers 200 duplicate, so the sender stops retrying.
	MismatchDuplicate MismatchPolicy = iota
	// MismatchConflict answers 409, telling the sender its id was reused.
	MismatchConflict
)

// LatePolicy says what the inbox does with a late arrival: an event
// received again after its dedupe key was pruned (the retention jobs'
// DedupeWindow, 72 h by default, had passed), while the message of its
// first receipt is still retained. Such a message is stored as new, with
// Message.RedeliveryOf naming the earlier one, and counted in
// wharf_inbox_requests_total{result="late"}.
type LatePolicy int

const (
	// LateProcess runs the handler of the message's type, as for any
	// message; the handler sees Message.RedeliveryOf. The default.
	LateProcess LatePolicy = iota
	// LateSkip stores the message processed, without running a handler
	// or inserting a job, and answers 200 {"status":"duplicate"}.
	LateSkip
	// LateReconcile runs the source's reconcile handler
	// (Inbox.HandleReconcile) instead of the type's.
	LateReconcile
)

// String returns the policy as stored and shown: "process", "skip" or
// "reconcile".
func (p LatePolicy) String() string {
	switch p {
	case LateProcess:
		return inboxjob.LateProcess
	case LateSkip:
		return inboxjob.LateSkip
	case LateReconcile:
		return inboxjob.LateReconcile
	}
	return fmt.Sprintf("LatePolicy(%d)", int(p))
}

// latePolicyOf is the LatePolicy stored as s.
func latePolicyOf(s string) LatePolicy {
	switch s {
	case inboxjob.LateSkip:
		return LateSkip
	case inboxjob.LateReconcile:
		return LateReconcile
	}
	return LateProcess
}

// Source describes one sender of webhooks: how its requests are verified and
// where its event ids live. Sources are matched by name against the last
// segment of the request path (or the {source} path value).
type Source struct {
	// Name identifies the source in URLs, dedupe keys and handlers: the same
	// event id from two sources is two events. 1–128 characters. Required.
	Name string
	// Verifier checks each request's signature over the raw body before
	// anything is parsed or stored. Required: an unsigned source must say so
	// explicitly with a signature.VerifierFunc that returns nil.
	Verifier signature.Verifier
	// IDHeader is the header holding the sender's event id, read before the
	// body. Defaults to the verifier's EventLocation().IDHeaders() in order
	// (IDHeader, AltIDHeader, MoreIDHeaders), when it implements
	// signature.EventLocator; then to X-Event-ID only when the verifier
	// signs that header (a NewHMAC Template with {header:X-Event-ID}) and
	// nothing else locates the id.
	// Set it to a header the signature does not cover only for a sender
	// that signs nothing else to dedupe on: a captured request replayed
	// with a fresh value in it passes as a new event.
	IDHeader string
	// IDFields are JSON body fields (dotted paths reach into objects) tried
	// in order for the event id after the headers. Defaults to the
	// verifier's EventLocation().IDField, then "id", "event_id", "messageId".
	// When none is present the id is "sha256:" + the hex SHA-256 of the
	// body's canonical JSON (keys sorted, HashExcludeFields removed).
	IDFields []string
	// TypeHeader is the header holding the event type. Defaults to the
	// verifier's EventLocation().TypeHeaders() in order (TypeHeader, then
	// MoreTypeHeaders).
	TypeHeader string
	// TypeFields are JSON body fields tried in order for the event type.
	// Defaults to the verifier's EventLocation().TypeField, then "type",
	// "event_type".
	TypeFields []string
	// HashExcludeFields are volatile body fields (delivery timestamps, retry
	// counters; dotted paths allowed) left out of the canonical JSON hashed
	// for the payload fingerprint and for a derived event id. Defaults to
	// none.
	HashExcludeFields []string
	// MaxBodyBytes limits the request body; a larger one is answered 413.
	// Defaults to DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// AllowNonJSON accepts bodies that are not JSON (form posts, say); the
	// event id must then come from a header or is the SHA-256 of the raw
	// body. Defaults to false: a body that is not valid JSON gets 400.
	AllowNonJSON bool
	// OnMismatch is the answer to an event id reused with a different
	// payload. Defaults to MismatchDuplicate.
	OnMismatch MismatchPolicy
	// DropHeaders names request headers never stored with this source's
	// messages: a token header of the sender's own scheme, say. The
	// Verifier still sees them. These are never stored, whatever the
	// source: Authorization, Cookie, Proxy-Authorization and the shared
	// tokens some providers send instead of a signature (X-Gitlab-Token,
	// X-Goog-Channel-Token, X-Hook-Secret, X-Api-Key, Api-Key,
	// X-Auth-Token, X-Webhook-Token, X-Webhook-Secret). Defaults to none.
	DropHeaders []string
	// OrderingFields are JSON body fields (dotted paths) tried in order for
	// the message's ordering key, and OrderingHeader a header tried before
	// them: messages of this source with the same key (the id of the
	// subscription or order the event is about, say) are processed one at
	// a time in receipt order. A message whose earlier one of its key is
	// still to process or failing waits, without using attempts, until
	// that one is processed, dead (its attempts exhausted, Permanent, or
	// Skip by an operator); messages of other keys are not held. A message
	// without the field or header has no key and no order. Defaults to
	// none: no ordering.
	OrderingFields []string
	// OrderingHeader: see OrderingFields.
	OrderingHeader string
	// AcceptTypes, when set, lists the event types the source's messages
	// are stored for: an exact type, "prefix.*" (every type starting
	// "prefix.") or "*". A verified request of another type (or of none)
	// is answered 200 {"status":"ignored"}: its dedupe key is claimed (a
	// redelivery is answered "ignored" again), and no message, body or
	// job is stored. IgnoreTypes lists types ignored instead, in the same
	// form; a type matching both is ignored. ReceiveTx and ReceiveManyTx
	// honour both for a source listed in Config.Sources. Counted in
	// wharf_inbox_requests_total{result="ignored"}. Defaults to none:
	// every type is stored.
	AcceptTypes []string
	// IgnoreTypes: see AcceptTypes.
	IgnoreTypes []string
	// LateArrivals is what to do with a late arrival of this source's
	// events (see LatePolicy). ReceiveTx and ReceiveManyTx honour it for
	// a source listed in Config.Sources; others get LateProcess. Defaults
	// to LateProcess.
	LateArrivals LatePolicy
}

// ignores reports whether the source ignores events of eventType (see
// AcceptTypes).
func (s *Source) ignores(eventType string) bool {
	matches := func(p string) bool { return shared.TypeMatches(p, eventType) }
	return slices.ContainsFunc(s.IgnoreTypes, matches) ||
		(len(s.AcceptTypes) > 0 && !slices.ContainsFunc(s.AcceptTypes, matches))
}

func (s *Source) validate(p *shared.Problems) {
	if n := len([]rune(s.Name)); n < 1 || n > 128 {
		p.Addf("source name %q must be 1–128 characters", s.Name)
	}
	if s.Verifier == nil {
		p.Addf("source %q has no Verifier", s.Name)
	}
	if s.MaxBodyBytes < 0 {
		p.Addf("source %q: MaxBodyBytes %d is negative", s.Name, s.MaxBodyBytes)
	}
	if s.OnMismatch != MismatchDuplicate && s.OnMismatch != MismatchConflict {
		p.Addf("source %q: unknown MismatchPolicy %d", s.Name, s.OnMismatch)
	}
	if s.LateArrivals < LateProcess || s.LateArrivals > LateReconcile {
		p.Addf("source %q: unknown LatePolicy %d", s.Name, s.LateArrivals)
	}
	for _, list := range [][]string{s.AcceptTypes, s.IgnoreTypes} {
		for _, t := range list {
			if !shared.ValidTypePattern(t) {
				p.Addf(`source %q: type %q is not a type, "prefix.*" or "*"`, s.Name, t)
			}
		}
	}
}

// location returns what the verifier knows of where ids and types live.
func (s *Source) location() signature.EventLocation {
	if loc, ok := s.Verifier.(signature.EventLocator); ok {
		return loc.EventLocation()
	}
	return signature.EventLocation{}
}

// idHeaders lists the headers tried for the event id, before the body, in
// order: the source's IDHeader; else the scheme's own id headers when the
// signature covers them, or when neither the scheme nor the source names a
// body field for the id (GitHub, Shopify, Twilio: their providers' ids are
// unsigned headers, documented); else X-Event-ID when the verifier signs
// it. A scheme's unsigned header is not read at all when a body field is
// named (the body, or its hash, is signed), and an unsigned X-Event-ID is
// never read: one captured request replayed with fresh values in it would
// pass as many events, each applied.
func (s *Source) idHeaders() []string {
	if s.IDHeader != "" {
		return []string{s.IDHeader}
	}
	loc := s.location()
	names := loc.IDHeaders()
	var out []string
	for _, h := range names {
		if loc.Signs(h) || (loc.IDField == "" && len(s.IDFields) == 0) {
			out = append(out, h)
		}
	}
	if len(names) > 0 {
		return out
	}
	if loc.IDField == "" && len(s.IDFields) == 0 && loc.Signs(HeaderEventID) {
		return []string{HeaderEventID}
	}
	return nil
}

// idFields lists the body fields tried for the event id, in order.
func (s *Source) idFields() []string {
	if len(s.IDFields) > 0 {
		return s.IDFields
	}
	return nonEmpty(s.location().IDField, "id", "event_id", "messageId")
}

// typeHeaders lists the headers tried for the event type, in order.
func (s *Source) typeHeaders() []string {
	if s.TypeHeader != "" {
		return []string{s.TypeHeader}
	}
	return s.location().TypeHeaders()
}

// typeFields lists the body fields tried for the event type, in order.
func (s *Source) typeFields() []string {
	if len(s.TypeFields) > 0 {
		return s.TypeFields
	}
	return nonEmpty(s.location().TypeField, "type", "event_type")
}

// nonEmpty returns its non-empty arguments without repeats, in order.
func nonEmpty(values ...string) []string {
	out := make([]string, 0, len(values))
	for _, v := range values {
		if v == "" {
			continue
		}
		dup := false
		for _, o := range out {
			dup = dup || o == v
		}
		if !dup {
			out = append(out, v)
		}
	}
	return out
}
