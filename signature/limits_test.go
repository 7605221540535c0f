package signature_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/signature"
)

// limitKeys is how many keys each limitCase's verifier holds, as during a
// rotation: work grows with it.
const limitKeys = 3

// limitNow is the clock of every limitCase.
const limitNow = int64(1700000000)

// limitCase is one scheme facing signature headers of well-formed, wrong
// signatures, its verifier holding limitKeys keys with its work counted.
type limitCase struct {
	name    string
	v       signature.Verifier
	work    func() int64 // MACs and signature verifications so far
	maxWork int64        // most of them one request may cost
	header  string       // the signature header's name
	request func(sig string) *signature.Request
	// sigs returns a signature header of n entries: n signatures, or for
	// Stripe and Paddle the timestamp and n-1 signatures. Single-signature
	// schemes ignore n but for its size: one signature of about n×32 bytes.
	sigs   func(n int) string
	single bool
}

// wrongBytes returns n bytes that differ with i: no key signed them.
func wrongBytes(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*7 + j)
	}
	return b
}

// entries joins n entries entry(0)… with sep.
func entries(n int, sep string, entry func(i int) string) string {
	all := make([]string, n)
	for i := range all {
		all[i] = entry(i)
	}
	return strings.Join(all, sep)
}

func limitCases(t testing.TB) []limitCase {
	t.Helper()
	opts := at(limitNow)
	ts := strconv.FormatInt(limitNow, 10)
	var whsec, whpk []string
	for range limitKeys {
		secret, err := signature.GenerateStandardSecret()
		require.NoError(t, err)
		_, public, err := signature.GenerateStandardKeyPair()
		require.NoError(t, err)
		whsec, whpk = append(whsec, secret), append(whpk, public)
	}
	hmacs := []string{"first-secret", "second-secret", "third-secret"}
	// v1a entries are real signatures by a key the verifier does not hold,
	// so that each costs a whole ed25519 verification, not an early check.
	other := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	var v1aSigs []string
	for i := range signature.MaxSignatureEntries {
		v1aSigs = append(v1aSigs, base64.StdEncoding.EncodeToString(ed25519.Sign(other, []byte(strconv.Itoa(i)))))
	}
	v1a := func(i int) string { return "v1a," + v1aSigs[i%len(v1aSigs)] }
	v1 := func(i int) string { return "v1," + base64.StdEncoding.EncodeToString(wrongBytes(i, 32)) }
	hexSig := func(i int) string { return hex.EncodeToString(wrongBytes(i, 32)) }
	long := func(n int) []byte { return wrongBytes(n, n*32) }
	sw := func(id, timestamp, sigHeader string) func(string) *signature.Request {
		return func(sig string) *signature.Request {
			return newRequest(`{"type":"x"}`, id, "msg_1", timestamp, ts, sigHeader, sig)
		}
	}
	generic, err := signature.NewHMAC(signature.Secrets(hmacs), signature.HMACConfig{
		SignatureHeader: "X-Acme-Signature",
		Prefix:          "v2=",
		Algorithm:       signature.SHA512,
		Encoding:        signature.Base64,
		TimestampHeader: "X-Acme-Timestamp",
		Template:        "{timestamp}.{body}",
	}, opts)
	require.NoError(t, err)

	cases := []limitCase{
		{
			name: "StandardWebhooks-v1", v: signature.NewStandardWebhooks(signature.Secrets(whsec), opts),
			maxWork: limitKeys, header: signature.HeaderWebhookSignature,
			request: sw(signature.HeaderWebhookID, signature.HeaderWebhookTimestamp, signature.HeaderWebhookSignature),
			sigs:    func(n int) string { return entries(n, " ", v1) },
		},
		{
			name: "StandardWebhooks-v1a", v: signature.NewStandardWebhooks(signature.Secrets(whpk), opts),
			maxWork: limitKeys * signature.MaxSignatureEntries, header: signature.HeaderWebhookSignature,
			request: sw(signature.HeaderWebhookID, signature.HeaderWebhookTimestamp, signature.HeaderWebhookSignature),
			sigs:    func(n int) string { return entries(n, " ", v1a) },
		},
		{
			// One MAC per whsec_ key, one verification per whpk_ key and v1a
			// entry: at most two, and two for each of as many entries.
			name: "StandardWebhooks-mixed", v: signature.NewStandardWebhooks(signature.Secrets{whsec[0], whpk[0], whsec[1], whpk[1]}, opts),
			maxWork: 2 + 2*signature.MaxSignatureEntries, header: signature.HeaderWebhookSignature,
			request: sw(signature.HeaderWebhookID, signature.HeaderWebhookTimestamp, signature.HeaderWebhookSignature),
			sigs: func(n int) string {
				return entries(n, " ", func(i int) string {
					if i%2 == 0 {
						return v1(i)
					}
					return v1a(i)
				})
			},
		},
		{
			name: "Svix-v1a", v: signature.NewSvix(signature.Secrets(whpk), opts),
			maxWork: limitKeys * signature.MaxSignatureEntries, header: signature.HeaderSvixSignature,
			request: sw(signature.HeaderSvixID, signature.HeaderSvixTimestamp, signature.HeaderSvixSignature),
			sigs:    func(n int) string { return entries(n, " ", v1a) },
		},
		{
			// Svix's whitelabelled header set is held to the same limits (v1
			// entries: the v1a cases above already cost the fuzzer enough
			// ed25519 verifications).
			name: "Svix-webhook-headers", v: signature.NewSvix(signature.Secrets(whsec), opts),
			maxWork: limitKeys, header: signature.HeaderWebhookSignature,
			request: sw(signature.HeaderWebhookID, signature.HeaderWebhookTimestamp, signature.HeaderWebhookSignature),
			sigs:    func(n int) string { return entries(n, " ", v1) },
		},
		{
			name: "Stripe", v: signature.NewStripe(signature.Secrets(hmacs), opts),
			maxWork: limitKeys, header: signature.HeaderStripeSignature,
			request: func(sig string) *signature.Request { return stripeRequest(sig, stripeBody) },
			sigs: func(n int) string {
				return "t=" + ts + entries(n-1, "", func(i int) string { return ",v1=" + hexSig(i) })
			},
		},
		{
			name: "Paddle", v: signature.NewPaddle(signature.Secrets(hmacs), opts),
			maxWork: limitKeys, header: signature.HeaderPaddleSignature,
			request: func(sig string) *signature.Request { return paddleRequest(sig, paddleBody) },
			sigs: func(n int) string {
				return "ts=" + ts + entries(n-1, "", func(i int) string { return ";h1=" + hexSig(i) })
			},
		},
		{
			name: "GitHub", v: signature.NewGitHub(signature.Secrets(hmacs), opts), single: true,
			maxWork: limitKeys, header: signature.HeaderGitHubSignature256,
			request: func(sig string) *signature.Request { return githubRequest(sig, githubBody) },
			sigs:    func(n int) string { return "sha256=" + hex.EncodeToString(long(n)) },
		},
		{
			name: "Shopify", v: signature.NewShopify(signature.Secrets(hmacs), opts), single: true,
			maxWork: limitKeys, header: signature.HeaderShopifyHmac,
			request: func(sig string) *signature.Request { return shopifyRequest(sig, `{"id":1}`, "1", "") },
			sigs:    func(n int) string { return base64.StdEncoding.EncodeToString(long(n)) },
		},
		{
			// Shopify's Events name for the same signature.
			name: "Shopify-events-headers", v: signature.NewShopify(signature.Secrets(hmacs), opts), single: true,
			maxWork: limitKeys, header: signature.HeaderShopifyEventsHmac,
			request: func(sig string) *signature.Request {
				return newRequest(`{"id":1}`, signature.HeaderShopifyEventsHmac, sig, signature.HeaderShopifyEventsEventID, "1")
			},
			sigs: func(n int) string { return base64.StdEncoding.EncodeToString(long(n)) },
		},
		{
			name: "Slack", v: signature.NewSlack(signature.Secrets(hmacs), opts), single: true,
			maxWork: limitKeys, header: signature.HeaderSlackSignature,
			request: func(sig string) *signature.Request { return slackRequest(ts, sig, slackBody) },
			sigs:    func(n int) string { return "v0=" + hex.EncodeToString(long(n)) },
		},
		{
			// Two MACs per key: the URL with and without its port.
			name: "Twilio", v: signature.NewTwilio(signature.Secrets(hmacs), opts), single: true,
			maxWork: 2 * limitKeys, header: signature.HeaderTwilioSignature,
			request: func(sig string) *signature.Request { return twilioForm(twilioURL, sig, twilioParams.Encode()) },
			sigs:    func(n int) string { return base64.StdEncoding.EncodeToString(long(n)) },
		},
		{
			name: "HMAC-timestamped", v: generic, single: true,
			maxWork: limitKeys, header: "X-Acme-Signature",
			request: func(sig string) *signature.Request {
				return newRequest("{}", "X-Acme-Timestamp", ts, "X-Acme-Signature", sig)
			},
			sigs: func(n int) string { return "v2=" + base64.StdEncoding.EncodeToString(long(n)) },
		},
	}
	for i := range cases {
		cases[i].work = signature.CountWork(cases[i].v)
	}
	return cases
}

// TestSignatureHeaderSizeLimit checks that every scheme refuses a signature
// header longer than MaxSignatureHeaderBytes, naming the limit, before any
// cryptography: a 1 MB header (what net/http's default MaxHeaderBytes lets
// through) costs no MAC and no verification.
func TestSignatureHeaderSizeLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range limitCases(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			huge := c.sigs(1 << 20 / 32)
			require.Greater(t, len(huge), 1<<20-100)
			for _, sig := range []string{huge, huge[:signature.MaxSignatureHeaderBytes+1]} {
				start := time.Now()
				err := c.v.Verify(ctx, c.request(sig))
				elapsed := time.Since(start)
				requireRejected(t, err, signature.ErrMalformedHeader)
				require.ErrorContains(t, err, c.header)
				require.ErrorContains(t, err, "MaxSignatureHeaderBytes")
				require.Zero(t, c.work(), "cryptography before the size check")
				// Refused by its length alone: no cryptography (above) and
				// no parse of the entries, which took half a second for
				// 11k v1a entries before the limit; the bound is generous
				// for -race and a loaded machine (parallel subtests on two
				// cores).
				require.Less(t, elapsed, 400*time.Millisecond)
			}

			// A header of exactly the limit is not refused for its size.
			err := c.v.Verify(ctx, c.request(huge[:signature.MaxSignatureHeaderBytes]))
			require.Error(t, err)
			require.NotContains(t, err.Error(), "MaxSignatureHeaderBytes")
		})
	}
}

// TestSignatureEntryLimit checks that the list schemes refuse more than
// MaxSignatureEntries entries before any cryptography, and that a header at
// the limit costs at most one verification per key and entry.
func TestSignatureEntryLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range limitCases(t) {
		if c.single {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			atLimit := c.sigs(signature.MaxSignatureEntries)
			require.LessOrEqual(t, len(atLimit), signature.MaxSignatureHeaderBytes, "real headers at the entry limit fit the size limit")
			requireRejected(t, c.v.Verify(ctx, c.request(atLimit)), signature.ErrNoMatch)
			work := c.work()
			require.Positive(t, work)
			require.LessOrEqual(t, work, c.maxWork)

			err := c.v.Verify(ctx, c.request(c.sigs(signature.MaxSignatureEntries+1)))
			requireRejected(t, err, signature.ErrMalformedHeader)
			require.ErrorContains(t, err, "MaxSignatureEntries")
			require.Equal(t, work, c.work(), "cryptography before the entry check")
		})
	}
}

// TestSignatureEntryLimitKeepsGenuine checks that a genuine signature in the
// last place a full header allows still verifies.
func TestSignatureEntryLimitKeepsGenuine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	wrong := signature.MaxSignatureEntries - 1
	wrongV1 := entries(wrong, " ", func(i int) string { return "v1," + base64.StdEncoding.EncodeToString(wrongBytes(i, 32)) })
	wrongHex := func(key string) string {
		return entries(wrong-1, "", func(i int) string { return key + hex.EncodeToString(wrongBytes(i, 32)) })
	}

	sw := signature.NewStandardWebhooks(signature.Secrets{swSecret}, atVector())
	require.NoError(t, sw.Verify(ctx, swRequest(swID, "1614265330", wrongV1+" "+swSignature, swBody)))
	requireRejected(t, sw.Verify(ctx, swRequest(swID, "1614265330", wrongV1+" v1,AA== "+swSignature, swBody)), signature.ErrMalformedHeader)

	stripe := signature.NewStripe(signature.Secrets{stripeSecret}, at(stripeTime))
	good := ",v1=" + stripeV1(stripeSecret, stripeTime, stripeBody)
	require.NoError(t, stripe.Verify(ctx, stripeRequest("t=1700000000"+wrongHex(",v1=")+good, stripeBody)))
	requireRejected(t, stripe.Verify(ctx, stripeRequest("t=1700000000"+wrongHex(",v1=")+",v0=00"+good, stripeBody)), signature.ErrMalformedHeader)

	paddle := signature.NewPaddle(signature.Secrets{paddleSecret}, at(paddleTimestamp))
	goodH1 := ";h1=" + paddleH1(paddleSecret, paddleTimestamp, paddleBody)
	require.NoError(t, paddle.Verify(ctx, paddleRequest("ts=1710929255"+wrongHex(";h1=")+goodH1, paddleBody)))
}

// TestSignatureWorkBounded checks the work one request costs in every
// scheme, the single-signature ones too: a request whose signatures are all
// wrong costs at most one MAC per key (and signed content), or one ed25519
// verification per key and entry.
func TestSignatureWorkBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range limitCases(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			requireRejected(t, c.v.Verify(ctx, c.request(c.sigs(signature.MaxSignatureEntries))), signature.ErrNoMatch)
			require.Positive(t, c.work())
			require.LessOrEqual(t, c.work(), c.maxWork)
		})
	}
}

// TestDuplicateSignatureHeader checks that a signature header sent twice is
// refused in every scheme before any cryptography, a genuine value first or
// not: which one the sender meant is anyone's guess.
func TestDuplicateSignatureHeader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range limitCases(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := c.request(c.sigs(2))
			r.Header.Add(c.header, c.sigs(3))
			err := c.v.Verify(ctx, r)
			requireRejected(t, err, signature.ErrMalformedHeader)
			require.ErrorContains(t, err, "sent 2 times")
			require.Zero(t, c.work())
		})
	}

	v := signature.NewGitHub(signature.Secrets{githubSecret}, nil)
	r := githubRequest(githubSignature, githubBody)
	require.NoError(t, v.Verify(ctx, r))
	r.Header.Add(signature.HeaderGitHubSignature256, githubSignature)
	requireRejected(t, v.Verify(ctx, r), signature.ErrMalformedHeader, githubSecret)
}

// FuzzSignatureWork checks that no signature header, in any scheme, verifies
// or costs more than the scheme's bound.
func FuzzSignatureWork(f *testing.F) {
	cases := limitCases(f)
	for _, c := range cases {
		f.Add(c.sigs(signature.MaxSignatureEntries), 1)
		f.Add(c.sigs(signature.MaxSignatureEntries+1), 1)
		f.Add(c.sigs(2), 2)
	}
	f.Add("v1a,"+strings.Repeat("A", 86)+"== v1,"+strings.Repeat("A", 43)+"=", 1)
	f.Add("t=1700000000,v1=,v1=00", 1)
	f.Fuzz(func(t *testing.T, sig string, times int) {
		times = 1 + max(times, 0)%3
		for _, c := range cases {
			r := c.request(sig)
			for range times - 1 {
				r.Header.Add(c.header, sig)
			}
			before := c.work()
			err := c.v.Verify(context.Background(), r)
			requireRequestError(t, err)
			if work := c.work() - before; work > c.maxWork {
				t.Fatalf("%s: %d operations for %q, more than %d", c.name, work, sig, c.maxWork)
			}
		}
	})
}
