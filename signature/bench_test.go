package signature_test

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wharfhq/wharf/signature"
)

// benchBody returns a JSON body of exactly size bytes.
func benchBody(size int) []byte {
	const head, tail = `{"id":"evt_bench","type":"bench","pad":"`, `"}`
	return []byte(head + strings.Repeat("x", size-len(head)-len(tail)) + tail)
}

// benchForm returns a form body of about size bytes with distinct names,
// and the parameter string Twilio signs for it (names sorted, each name then
// its value).
func benchForm(size int) (body, signed string) {
	form := url.Values{}
	for i := 0; len(form.Encode()) < size; i++ {
		form.Set(fmt.Sprintf("Param%05d", i), strings.Repeat("v", 40))
	}
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(form)) {
		b.WriteString(name + form.Get(name))
	}
	return form.Encode(), b.String()
}

type benchCase struct {
	name string
	v    signature.Verifier
	req  *signature.Request
}

func benchCases(b *testing.B, size int) []benchCase {
	b.Helper()
	body := benchBody(size)
	now := time.Unix(1700000000, 0)
	opts := &signature.Options{Now: func() time.Time { return now }}
	ts := strconv.FormatInt(now.Unix(), 10)
	mustHeader := func(h http.Header, err error) http.Header {
		if err != nil {
			b.Fatal(err)
		}
		return h
	}
	hexMAC := func(secret, content string) string {
		return hex.EncodeToString(macOf(sha256.New, secret, content))
	}
	header := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	private, public, err := signature.GenerateStandardKeyPair()
	if err != nil {
		b.Fatal(err)
	}
	form, formSigned := benchForm(size)
	const twilioURL = "https://example.com/twilio?x=1"
	bodyHash := sha256.Sum256(body)
	jsonURL := twilioURL + "&bodySHA256=" + hex.EncodeToString(bodyHash[:])
	sha1Base64 := func(content string) string {
		return base64.StdEncoding.EncodeToString(macOf(sha1.New, twilioToken, content))
	}

	return []benchCase{
		{"StandardWebhooks-v1", signature.NewStandardWebhooks(signature.Secrets{swSecret}, opts),
			&signature.Request{Header: mustHeader(signature.SignStandardWebhooks([]string{swSecret}, "msg_1", now, body)), Body: body}},
		{"StandardWebhooks-v1a-ed25519", signature.NewStandardWebhooks(signature.Secrets{public}, opts),
			&signature.Request{Header: mustHeader(signature.SignStandardWebhooks([]string{private}, "msg_1", now, body)), Body: body}},
		{"Stripe", signature.NewStripe(signature.Secrets{stripeSecret}, opts),
			&signature.Request{Header: mustHeader(signature.SignStripe([]string{stripeSecret}, now, body)), Body: body}},
		{"Paddle", signature.NewPaddle(signature.Secrets{paddleSecret}, opts),
			&signature.Request{Header: header(signature.HeaderPaddleSignature, "ts="+ts+";h1="+hexMAC(paddleSecret, ts+":"+string(body))), Body: body}},
		{"GitHub", signature.NewGitHub(signature.Secrets{githubSecret}, opts),
			&signature.Request{Header: header(signature.HeaderGitHubSignature256, "sha256="+hexMAC(githubSecret, string(body))), Body: body}},
		{"Shopify", signature.NewShopify(signature.Secrets{shopifySecret}, opts),
			&signature.Request{Header: header(signature.HeaderShopifyHmac, shopifyHMAC(shopifySecret, string(body))), Body: body}},
		{"Slack", signature.NewSlack(signature.Secrets{slackSecret}, opts),
			&signature.Request{Header: header(signature.HeaderSlackTimestamp, ts, signature.HeaderSlackSignature, "v0="+hexMAC(slackSecret, "v0:"+ts+":"+string(body))), Body: body}},
		{"Twilio-form", signature.NewTwilio(signature.Secrets{twilioToken}, opts),
			&signature.Request{URL: twilioURL, Header: header("Content-Type", "application/x-www-form-urlencoded", signature.HeaderTwilioSignature, sha1Base64(twilioURL+formSigned)), Body: []byte(form)}},
		{"Twilio-json", signature.NewTwilio(signature.Secrets{twilioToken}, opts),
			&signature.Request{URL: jsonURL, Header: header("Content-Type", "application/json", signature.HeaderTwilioSignature, sha1Base64(jsonURL)), Body: body}},
	}
}

// hmacNsPerOp times n plain HMAC-SHA256s of body (at least 20) and returns
// the cost of one.
func hmacNsPerOp(body []byte, n int) float64 {
	key := []byte(githubSecret)
	n = max(n, 20)
	start := time.Now()
	for range n {
		mac := hmac.New(sha256.New, key)
		mac.Write(body)
		mac.Sum(nil)
	}
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}

// BenchmarkVerify measures each scheme's verification of a 1 KB and a 64 KB
// body. x-hmac is its cost in plain HMAC-SHA256s of the same body, timed
// right after it in the same sub-benchmark for as many iterations, so load
// from other processes weighs on both alike; the baseline sub-benchmarks
// report that HMAC's own ns/op.
func BenchmarkVerify(b *testing.B) {
	ctx := context.Background()
	for _, size := range []int{1 << 10, 64 << 10} {
		sizeName := fmt.Sprintf("%dKB", size>>10)
		body, key := benchBody(size), []byte(githubSecret)
		b.Run("baseline-HMAC-SHA256/"+sizeName, func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				mac := hmac.New(sha256.New, key)
				mac.Write(body)
				mac.Sum(nil)
			}
		})
		for _, c := range benchCases(b, size) {
			if err := c.v.Verify(ctx, c.req); err != nil {
				b.Fatalf("%s does not verify: %v", c.name, err)
			}
			b.Run(c.name+"/"+sizeName, func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					if err := c.v.Verify(ctx, c.req); err != nil {
						b.Fatal(err)
					}
				}
				perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				b.ReportMetric(perOp/hmacNsPerOp(body, b.N), "x-hmac")
			})
		}
	}
}

// repeatEntries joins entry(0), entry(1)… with sep until the next entry
// would take the result past size bytes.
func repeatEntries(size int, sep string, entry func(i int) string) string {
	var b strings.Builder
	for i := 0; ; i++ {
		e := entry(i)
		if i > 0 {
			e = sep + e
		}
		if b.Len()+len(e) > size {
			return b.String()
		}
		b.WriteString(e)
	}
}

// hostileCases are requests whose signature header is size bytes of
// well-formed, wrong signatures, one verifier each with keys keys.
func hostileCases(b *testing.B, size, keys int) []benchCase {
	b.Helper()
	now := time.Unix(1700000000, 0)
	opts := &signature.Options{Now: func() time.Time { return now }}
	ts := strconv.FormatInt(now.Unix(), 10)
	body := benchBody(1 << 10)
	var publics, secrets []string
	for range keys {
		_, public, err := signature.GenerateStandardKeyPair()
		if err != nil {
			b.Fatal(err)
		}
		secret, err := signature.GenerateStandardSecret()
		if err != nil {
			b.Fatal(err)
		}
		publics, secrets = append(publics, public), append(secrets, secret)
	}
	// Distinct wrong signatures, so that no cache could skip repeats.
	sig := func(i, n int) []byte {
		s := make([]byte, n)
		for j := range s {
			s[j] = byte(i + j)
		}
		s[0], s[1] = byte(i), byte(i>>8)
		return s
	}
	// Real signatures by another key, so that each costs a full ed25519
	// verification rather than failing an early check.
	otherKey := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	v1a := repeatEntries(size, " ", func(i int) string {
		return "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(otherKey, []byte(strconv.Itoa(i))))
	})
	v1 := repeatEntries(size, " ", func(i int) string { return "v1," + base64.StdEncoding.EncodeToString(sig(i, 32)) })
	stripe := "t=" + ts + repeatEntries(size-len(ts)-2, "", func(i int) string { return ",v1=" + hex.EncodeToString(sig(i, 32)) })
	swRequest := func(sigHeader string) *signature.Request {
		h := http.Header{}
		h.Set(signature.HeaderWebhookID, "msg_1")
		h.Set(signature.HeaderWebhookTimestamp, ts)
		h.Set(signature.HeaderWebhookSignature, sigHeader)
		return &signature.Request{Header: h, Body: body}
	}
	stripeRequest := &signature.Request{Header: http.Header{signature.HeaderStripeSignature: {stripe}}, Body: body}
	return []benchCase{
		{"StandardWebhooks-v1a", signature.NewStandardWebhooks(signature.Secrets(publics), opts), swRequest(v1a)},
		{"StandardWebhooks-v1", signature.NewStandardWebhooks(signature.Secrets(secrets), opts), swRequest(v1)},
		{"Stripe", signature.NewStripe(signature.Secrets(secrets), opts), stripeRequest},
	}
}

// BenchmarkHostileSignatureHeader measures the refusal of signature headers
// filled with wrong signatures: 1 MB of them (what a server's default
// MaxHeaderBytes lets through) and MaxSignatureEntries of them, with one and
// three keys.
func BenchmarkHostileSignatureHeader(b *testing.B) {
	ctx := context.Background()
	for _, keys := range []int{1, 3} {
		for _, size := range []int{1 << 20, 1 << 10} {
			for _, c := range hostileCases(b, size, keys) {
				b.Run(fmt.Sprintf("%s/%dKB/%dkeys", c.name, size>>10, keys), func(b *testing.B) {
					for b.Loop() {
						if c.v.Verify(ctx, c.req) == nil {
							b.Fatal("a hostile header verified")
						}
					}
				})
			}
		}
	}
}
