package signature_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/signature"
)

// The two header sets NewSvix reads, each named as the request carries it.
var (
	svixSet    = [3]string{signature.HeaderSvixID, signature.HeaderSvixTimestamp, signature.HeaderSvixSignature}
	webhookSet = [3]string{signature.HeaderWebhookID, signature.HeaderWebhookTimestamp, signature.HeaderWebhookSignature}
)

// svixRequest returns a request of body carrying the given headers; an
// empty value leaves its header out.
func svixRequest(body string, pairs map[string]string) *signature.Request {
	h := http.Header{}
	for name, value := range pairs {
		if value != "" {
			h.Set(name, value)
		}
	}
	return &signature.Request{Method: http.MethodPost, Header: h, Body: []byte(body)}
}

// vectorUnder returns the published vector's three values under set.
func vectorUnder(set [3]string) map[string]string {
	return map[string]string{set[0]: swID, set[1]: "1614265330", set[2]: swSignature}
}

// TestSvixWebhookHeaders: Svix sends the webhook-* set for applications
// with whitelabelled headers, and its libraries accept it ("valid unbranded
// signature is valid" in svix/svix-webhooks, go/webhook_test.go). So does
// NewSvix, and the inbox then reads the id from webhook-id.
func TestSvixWebhookHeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := signature.NewSvix(signature.Secrets{swSecret}, atVector())
	require.NoError(t, v.Verify(ctx, svixRequest(swBody, vectorUnder(webhookSet))))
	require.Equal(t, []string{signature.HeaderSvixID, signature.HeaderWebhookID}, v.EventLocation().IDHeaders())

	tampered := svixRequest(`{"test": 2432232315}`, vectorUnder(webhookSet))
	requireRejected(t, v.Verify(ctx, tampered), signature.ErrNoMatch, swSecret)
	requireRejected(t, signature.NewSvix(signature.Secrets{swSecret}, at(swTimestamp+301)).Verify(ctx, svixRequest(swBody, vectorUnder(webhookSet))),
		signature.ErrStaleTimestamp, swSecret)
}

// TestSvixHeaderSetsNeverMix: the set is chosen by its id header, svix-id
// first, and read whole; one set's id is never checked against the other's
// signature, and svix-id, the id read first, is always signed.
func TestSvixHeaderSetsNeverMix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	merge := func(maps ...map[string]string) map[string]string {
		out := map[string]string{}
		for _, m := range maps {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	svix, webhook := vectorUnder(svixSet), vectorUnder(webhookSet)
	tests := []struct {
		name    string
		headers map[string]string
		want    error  // nil: verifies
		naming  string // a header the error names
	}{
		{"BothSetsGenuine", merge(webhook, svix), nil, ""},
		// With svix-id present, the webhook-* set is not read at all.
		{"SvixGenuineWebhookGarbage", merge(svix, map[string]string{signature.HeaderWebhookSignature: "v1,AAAA", signature.HeaderWebhookID: "forged"}), nil, ""},
		{"SvixForgedWebhookGenuine", merge(webhook, svix, map[string]string{signature.HeaderSvixSignature: "v1,AAAA"}), signature.ErrNoMatch, ""},
		// A captured webhook-* request with a svix-id added, which the inbox
		// would read first: refused, since svix-id calls for the svix-* set
		// (Svix's libraries would fall back to webhook-* here).
		{"ForgedSvixIDOnWebhookSet", merge(webhook, map[string]string{signature.HeaderSvixID: "msg_forged"}), signature.ErrMissingHeader, signature.HeaderSvixTimestamp},
		{"SvixIDAndTimestampWithWebhookSignature", merge(webhook, map[string]string{signature.HeaderSvixID: swID, signature.HeaderSvixTimestamp: "1614265330"}),
			signature.ErrMissingHeader, signature.HeaderSvixSignature},
		{"WebhookIDWithSvixTimestampAndSignature", merge(map[string]string{signature.HeaderWebhookID: swID}, svix, map[string]string{signature.HeaderSvixID: ""}),
			signature.ErrMissingHeader, signature.HeaderWebhookTimestamp},
		// Without svix-id, stray svix-* headers are not read.
		{"StraySvixSignature", merge(webhook, map[string]string{signature.HeaderSvixSignature: "v1,AAAA"}), nil, ""},
		{"NoIDHeader", map[string]string{signature.HeaderSvixTimestamp: "1614265330", signature.HeaderWebhookSignature: swSignature}, signature.ErrMissingHeader, "svix-id or webhook-id"},
		{"BlankSvixID", merge(webhook, svix, map[string]string{signature.HeaderSvixID: " \t"}), signature.ErrMissingHeader, "svix-id is blank"},
	}
	v := signature.NewSvix(signature.Secrets{swSecret}, atVector())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := v.Verify(ctx, svixRequest(swBody, tt.headers))
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			requireRejected(t, err, tt.want, swSecret)
			require.ErrorContains(t, err, tt.naming)
		})
	}

	// Present but empty is present: svix-id chooses the svix-* set.
	r := svixRequest(swBody, webhook)
	r.Header[http.CanonicalHeaderKey(signature.HeaderSvixID)] = []string{""}
	err := v.Verify(ctx, r)
	requireRejected(t, err, signature.ErrMissingHeader, swSecret)
	require.ErrorContains(t, err, signature.HeaderSvixID)
}

// FuzzSvixHeaderSets sends any subset of the six headers, with any ids,
// timestamp and signature. Whatever verifies carries the whole set of its
// first id header, and that id is the signed one: what the inbox reads
// first is never an unsigned id.
func FuzzSvixHeaderSets(f *testing.F) {
	const all = 0b111111
	f.Add(uint8(all), swID, swID, "1614265330", swSignature, swBody)
	f.Add(uint8(0b111001), "msg_forged", swID, "1614265330", swSignature, swBody)
	f.Add(uint8(0b001111), swID, "msg_other", "1614265330", swSignature, swBody)
	f.Add(uint8(0b000111), swID, "", "1614265330", swSignature, swBody)
	f.Add(uint8(0), "", "", "", "", "")
	v := signature.NewSvix(signature.Secrets{swSecret}, atVector())
	loc := v.EventLocation()
	f.Fuzz(func(t *testing.T, present uint8, svixID, webhookID, ts, sig, body string) {
		values := map[string]string{}
		for i, name := range append(svixSet[:], webhookSet[:]...) {
			if present&(1<<i) == 0 {
				continue
			}
			switch i {
			case 0:
				values[name] = svixID
			case 3:
				values[name] = webhookID
			case 1, 4:
				values[name] = ts
			default:
				values[name] = sig
			}
		}
		r := svixRequest(body, values)
		err := v.Verify(context.Background(), r)
		if err != nil {
			requireRequestError(t, err)
			return
		}
		if body != swBody {
			t.Fatalf("forged body verified: %q", body)
		}
		// The id the inbox reads: the first present, non-blank id header.
		var first string
		for _, name := range loc.IDHeaders() {
			if first = strings.TrimSpace(r.Header.Get(name)); first != "" {
				set := svixSet
				if name == signature.HeaderWebhookID {
					set = webhookSet
				}
				for _, h := range set {
					require.NotEmpty(t, r.Header.Get(h), "verified without %s", h)
				}
				break
			}
		}
		require.Equal(t, swID, first, "the id read first is not the signed one")
	})
}
