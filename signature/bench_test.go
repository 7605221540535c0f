package signature_test

import (
	"context"
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

// BenchmarkHostileSignatureHeader measures each scheme's refusal of
// signature headers of wrong signatures, its verifier holding limitKeys keys:
// 1 MB of them (what net/http's default MaxHeaderBytes lets through), refused
// by its size, and MaxSignatureEntries of them, the most work a request can
// cost. ops is the MACs and signature verifications per request.
func BenchmarkHostileSignatureHeader(b *testing.B) {
	ctx := context.Background()
	sizes := []struct {
		name    string
		entries int
	}{{"1MB", 1 << 20 / 32}, {"MaxSignatureEntries", signature.MaxSignatureEntries}}
	for _, size := range sizes {
		for _, c := range limitCases(b) {
			req := c.request(c.sigs(size.entries))
			b.Run(c.name+"/"+size.name, func(b *testing.B) {
				before := c.work()
				for b.Loop() {
					if c.v.Verify(ctx, req) == nil {
						b.Fatal("a hostile header verified")
					}
				}
				b.ReportMetric(float64(c.work()-before)/float64(b.N), "ops")
			})
		}
	}
}
