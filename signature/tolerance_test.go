package signature_test

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/signature"
)

// TestToleranceOnlyMinusOneDisables checks that a negative Tolerance other
// than -1 (a typo such as -5*time.Minute) fails closed instead of disabling
// the timestamp check, for each way a scheme checks its timestamp.
func TestToleranceOnlyMinusOneDisables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const yearLater = 365 * 24 * 3600

	verifiers := []struct {
		name   string
		verify func(opts *signature.Options) error
		signed int64
	}{
		{"StandardWebhooks", func(opts *signature.Options) error {
			return signature.NewStandardWebhooks(signature.Secrets{swSecret}, opts).Verify(ctx, swRequest(swID, "1614265330", swSignature, swBody))
		}, swTimestamp},
		{"Stripe", func(opts *signature.Options) error {
			return signature.NewStripe(signature.Secrets{stripeSecret}, opts).Verify(ctx,
				stripeRequest("t=1700000000,v1="+stripeV1(stripeSecret, stripeTime, stripeBody), stripeBody))
		}, stripeTime},
		{"Slack", func(opts *signature.Options) error {
			return signature.NewSlack(signature.Secrets{slackSecret}, opts).Verify(ctx, slackRequest("1531420618", slackSignature, slackBody))
		}, slackTimestamp},
	}
	for _, v := range verifiers {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			clock := func(unix int64) func() time.Time { return func() time.Time { return time.Unix(unix, 0) } }

			// -1 disables the check: a year-old signature verifies.
			require.NoError(t, v.verify(&signature.Options{Tolerance: -1, Now: clock(v.signed + yearLater)}))

			// Any other negative value refuses every request, fresh or not.
			for _, bad := range []time.Duration{-5 * time.Minute, -2, -time.Microsecond} {
				for _, now := range []int64{v.signed, v.signed + yearLater} {
					err := v.verify(&signature.Options{Tolerance: bad, Now: clock(now)})
					require.ErrorIs(t, err, signature.ErrInvalidOptions, "tolerance %s", bad)
					require.NotErrorIs(t, err, signature.ErrNoSecrets, "a configuration problem, not a missing secret")
					require.True(t, signature.ReceiverFault(err), "a receiving-side problem, as the inbox expects")
					require.ErrorContains(t, err, "only -1 disables")
				}
			}

			// A positive tolerance still applies.
			require.NoError(t, v.verify(&signature.Options{Tolerance: time.Minute, Now: clock(v.signed + 59)}))
			require.ErrorIs(t, v.verify(&signature.Options{Tolerance: time.Minute, Now: clock(v.signed + 61)}), signature.ErrStaleTimestamp)
		})
	}
}

// timestampedSchemes are the schemes that sign a timestamp, each with a
// function signing a request at any unix second a sender can write.
func timestampedSchemes(t *testing.T) []struct {
	name   string
	v      func(opts *signature.Options) signature.Verifier
	signed func(ts int64) *signature.Request
} {
	t.Helper()
	swKey, err := signature.DecodeStandardSecret(swSecret)
	require.NoError(t, err)
	swSigned := func(id, timestamp, sigHeader string) func(int64) *signature.Request {
		return func(ts int64) *signature.Request {
			raw := strconv.FormatInt(ts, 10)
			sig := "v1," + base64.StdEncoding.EncodeToString(macOf(sha256.New, string(swKey), swID+"."+raw+"."+swBody))
			return newRequest(swBody, id, swID, timestamp, raw, sigHeader, sig)
		}
	}
	acme := signature.HMACConfig{
		SignatureHeader: "X-Acme-Signature", Prefix: "v2=", Algorithm: signature.SHA512, Encoding: signature.Base64,
		TimestampHeader: "X-Acme-Timestamp", Template: "{timestamp}.{body}",
	}
	return []struct {
		name   string
		v      func(opts *signature.Options) signature.Verifier
		signed func(ts int64) *signature.Request
	}{
		{"StandardWebhooks", func(opts *signature.Options) signature.Verifier {
			return signature.NewStandardWebhooks(signature.Secrets{swSecret}, opts)
		}, swSigned(signature.HeaderWebhookID, signature.HeaderWebhookTimestamp, signature.HeaderWebhookSignature)},
		{"Svix", func(opts *signature.Options) signature.Verifier {
			return signature.NewSvix(signature.Secrets{swSecret}, opts)
		}, swSigned(signature.HeaderSvixID, signature.HeaderSvixTimestamp, signature.HeaderSvixSignature)},
		{"Stripe", func(opts *signature.Options) signature.Verifier {
			return signature.NewStripe(signature.Secrets{stripeSecret}, opts)
		}, func(ts int64) *signature.Request {
			return stripeRequest(fmt.Sprintf("t=%d,v1=%s", ts, stripeV1(stripeSecret, ts, stripeBody)), stripeBody)
		}},
		{"Paddle", func(opts *signature.Options) signature.Verifier {
			return signature.NewPaddle(signature.Secrets{paddleSecret}, opts)
		}, func(ts int64) *signature.Request {
			return paddleRequest(fmt.Sprintf("ts=%d;h1=%s", ts, paddleH1(paddleSecret, ts, paddleBody)), paddleBody)
		}},
		{"Slack", func(opts *signature.Options) signature.Verifier {
			return signature.NewSlack(signature.Secrets{slackSecret}, opts)
		}, func(ts int64) *signature.Request {
			raw := strconv.FormatInt(ts, 10)
			return slackRequest(raw, "v0="+hex.EncodeToString(macOf(sha256.New, slackSecret, "v0:"+raw+":"+slackBody)), slackBody)
		}},
		{"HMAC-timestamped", func(opts *signature.Options) signature.Verifier {
			v, err := signature.NewHMAC(signature.Secrets{genericSecret}, acme, opts)
			require.NoError(t, err)
			return v
		}, func(ts int64) *signature.Request {
			raw := strconv.FormatInt(ts, 10)
			sig := "v2=" + base64.StdEncoding.EncodeToString(macOf(sha512.New, genericSecret, raw+"."+`{}`))
			return newRequest(`{}`, "X-Acme-Timestamp", raw, "X-Acme-Signature", sig)
		}},
	}
}

// TestExtremeTimestamps checks, in every timestamped scheme, genuinely
// signed requests at unix seconds no clock reads, up to the int64 limits:
// none overflows the comparison with now (each is stale, whatever the
// tolerance), and the error says truthfully when the request was signed. The
// edges of the largest tolerance, math.MaxInt64 nanoseconds, are exact to
// the nanosecond.
func TestExtremeTimestamps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const (
		nowSec    = int64(1700000000)
		maxTol    = time.Duration(math.MaxInt64) // 9223372036.854775807s
		maxSec    = int64(maxTol / time.Second)  // 9223372036
		maxFrac   = int(maxTol % time.Second)    // 854775807
		centuries = int64(200 * 365 * 24 * 3600)
	)
	dateOf := func(ts int64) string { return time.Unix(ts, 0).UTC().Format(time.RFC3339) }
	tests := []struct {
		name      string
		signed    int64
		nowNsec   int
		tolerance time.Duration // 0: the default
		says      []string      // in the error; none when it verifies
	}{
		{"MaxInt64", math.MaxInt64, 0, 0, []string{"unix 9223372036854775807,", "more than 292 years in the future"}},
		{"MaxInt64/MaxTolerance", math.MaxInt64, 0, maxTol, []string{"more than 292 years in the future"}},
		{"MinInt64", math.MinInt64, 0, 0, []string{"unix -9223372036854775808,", "more than 292 years in the past"}},
		{"MinInt64/MaxTolerance", math.MinInt64, 0, maxTol, []string{"more than 292 years in the past"}},
		{"1e15", 1e15, 0, maxTol, []string{"unix 1000000000000000,", "more than 292 years in the future"}},
		{"-1e15", -1e15, 0, maxTol, []string{"unix -1000000000000000,", "more than 292 years in the past"}},
		{"TwoCenturiesAgo", nowSec - centuries, 0, 0,
			[]string{fmt.Sprintf("unix %d (%s),", nowSec-centuries, dateOf(nowSec-centuries)), "in the past, tolerance 5m0s"}},
		{"TwoCenturiesAgo/MaxTolerance", nowSec - centuries, 0, maxTol, nil},
		{"TenMinutesAhead", nowSec + 600, 0, 0, []string{"unix 1700000600 (2023-11-14T22:23:20Z), 10m0s in the future, tolerance 5m0s"}},
		{"PastEdge", nowSec - maxSec, maxFrac, maxTol, nil},
		{"PastEdge+1ns", nowSec - maxSec, maxFrac + 1, maxTol, []string{"in the past"}},
		{"PastEdge+1s", nowSec - maxSec - 1, 0, maxTol, []string{"more than 292 years in the past"}},
		{"FutureEdge", nowSec + maxSec + 1, 1e9 - maxFrac, maxTol, nil},
		{"FutureEdge+1ns", nowSec + maxSec + 1, 1e9 - maxFrac - 1, maxTol, []string{"in the future"}},
		{"FutureEdge+1s", nowSec + maxSec + 2, 0, maxTol, []string{"more than 292 years in the future"}},
		{"DefaultPastEdge", nowSec - 300, 0, 0, nil},
		{"DefaultPastEdge+1ns", nowSec - 300, 1, 0, []string{"5m0.000000001s in the past"}},
		{"DefaultFutureEdge", nowSec + 300, 0, 0, nil},
		{"DefaultFutureEdge-half", nowSec + 300, 5e8, 0, nil},
		{"DefaultFutureEdge+1ns", nowSec + 301, 1e9 - 1, 0, []string{"5m0.000000001s in the future"}},
	}
	for _, s := range timestampedSchemes(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			for _, tt := range tests {
				now := time.Unix(nowSec, int64(tt.nowNsec))
				v := s.v(&signature.Options{Tolerance: tt.tolerance, Now: func() time.Time { return now }})
				err := v.Verify(ctx, s.signed(tt.signed))
				if tt.says == nil {
					require.NoError(t, err, tt.name)
					continue
				}
				requireRejected(t, err, signature.ErrStaleTimestamp, swSecret, stripeSecret, paddleSecret, slackSecret, genericSecret)
				for _, want := range tt.says {
					require.ErrorContains(t, err, want, tt.name)
				}
			}
		})
	}
}

// FuzzTimestampTolerance checks the timestamp check against exact integer
// arithmetic for any signed unix second, clock and tolerance: a genuinely
// signed request verifies exactly when it is within the tolerance, and is
// otherwise stale with an error that gives the timestamp as sent.
func FuzzTimestampTolerance(f *testing.F) {
	f.Add(int64(math.MaxInt64), int64(1700000000), int64(0), int64(0))
	f.Add(int64(math.MinInt64), int64(1700000000), int64(0), int64(math.MaxInt64))
	f.Add(int64(1700000000-9223372036), int64(1700000000), int64(854775807), int64(math.MaxInt64))
	f.Add(int64(1700000301), int64(1700000000), int64(999999999), int64(0))
	f.Add(int64(1e15), int64(-1e12), int64(5e8), int64(time.Hour))
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, signed, nowSec, nowNsec, tol int64) {
		// A clock time.Unix represents, any tolerance but the negative ones
		// that disable the check or are refused.
		nowSec %= 1e15
		nowNsec = (nowNsec%1e9 + 1e9) % 1e9
		if tol < 0 {
			tol = -(tol + 1)
		}
		tolerance := time.Duration(tol)
		if tolerance == 0 {
			tolerance = signature.DefaultTolerance
		}
		now := time.Unix(nowSec, nowNsec)
		v := signature.NewStripe(signature.Secrets{stripeSecret}, &signature.Options{Tolerance: time.Duration(tol), Now: func() time.Time { return now }})
		err := v.Verify(ctx, stripeRequest(fmt.Sprintf("t=%d,v1=%s", signed, stripeV1(stripeSecret, signed, stripeBody)), stripeBody))

		// |signed s - now| <= tolerance, in nanoseconds, without overflow.
		diff := new(big.Int).Mul(big.NewInt(signed), big.NewInt(int64(time.Second)))
		diff.Sub(diff, new(big.Int).Add(new(big.Int).Mul(big.NewInt(nowSec), big.NewInt(int64(time.Second))), big.NewInt(nowNsec)))
		within := diff.Abs(diff).Cmp(big.NewInt(int64(tolerance))) <= 0
		if within {
			require.NoError(t, err)
			return
		}
		requireRejected(t, err, signature.ErrStaleTimestamp, stripeSecret)
		require.ErrorContains(t, err, fmt.Sprintf("signed at unix %d", signed))
	})
}
