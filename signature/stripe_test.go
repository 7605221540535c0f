package signature_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/signature"
)

// Stripe publishes no fixed vector; its official library is the reference
// (TestStripeOfficialLibrary, in the interop module).
const (
	stripeSecret = "whsec_test_c2VjcmV0LWZvci1zdHJpcGUtdGVzdHM"
	stripeBody   = `{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","type":"invoice.paid"}`
	stripeTime   = int64(1700000000)
)

func stripeRequest(sigHeader, body string) *signature.Request {
	return newRequest(body, signature.HeaderStripeSignature, sigHeader)
}

// stripeV1 is Stripe's documented v1 signature, computed here with the
// standard library alone: hex HMAC-SHA256 of "t.body" keyed by the whole
// secret string.
func stripeV1(secret string, ts int64, body string) string {
	return hex.EncodeToString(macOf(sha256.New, secret, strconv.FormatInt(ts, 10)+"."+body))
}

func TestStripe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := signature.NewStripe(signature.Secrets{stripeSecret}, at(stripeTime))

	h, err := signature.SignStripe([]string{stripeSecret}, time.Unix(stripeTime, 0), []byte(stripeBody))
	require.NoError(t, err)
	want := "t=1700000000,v1=" + stripeV1(stripeSecret, stripeTime, stripeBody)
	require.Equal(t, want, h.Get(signature.HeaderStripeSignature))
	require.NoError(t, v.Verify(ctx, stripeRequest(want, stripeBody)))

	// Unknown schemes (v0, future ones) are skipped; any v1 may match.
	require.NoError(t, v.Verify(ctx, stripeRequest("t=1700000000,v0=abcd,v1=00ff,v1="+stripeV1(stripeSecret, stripeTime, stripeBody)+",v9=x", stripeBody)))

	require.Equal(t, signature.EventLocation{IDField: "id", TypeField: "type"}, v.EventLocation())
}

func TestStripeRejects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	good := stripeV1(stripeSecret, stripeTime, stripeBody)
	const other = "whsec_another_secret_entirely"

	tests := []struct {
		name    string
		secrets signature.Secrets
		header  string
		body    string
		now     int64
		want    error
	}{
		{"TamperedBody", signature.Secrets{stripeSecret}, "t=1700000000,v1=" + good, stripeBody + " ", stripeTime, signature.ErrNoMatch},
		{"TamperedTimestamp", signature.Secrets{stripeSecret}, "t=1700000001,v1=" + good, stripeBody, stripeTime, signature.ErrNoMatch},
		{"WrongSecret", signature.Secrets{other}, "t=1700000000,v1=" + good, stripeBody, stripeTime, signature.ErrNoMatch},
		{"OnlyV0", signature.Secrets{stripeSecret}, "t=1700000000,v0=" + good, stripeBody, stripeTime, signature.ErrMalformedHeader},
		{"Stale", signature.Secrets{stripeSecret}, "t=1700000000,v1=" + good, stripeBody, stripeTime + 301, signature.ErrStaleTimestamp},
		{"Future", signature.Secrets{stripeSecret}, "t=1700000000,v1=" + good, stripeBody, stripeTime - 301, signature.ErrStaleTimestamp},
		{"MissingHeader", signature.Secrets{stripeSecret}, "", stripeBody, stripeTime, signature.ErrMissingHeader},
		{"NoTimestamp", signature.Secrets{stripeSecret}, "v1=" + good, stripeBody, stripeTime, signature.ErrMalformedHeader},
		{"TwoTimestamps", signature.Secrets{stripeSecret}, "t=1700000000,t=1700000000,v1=" + good, stripeBody, stripeTime, signature.ErrMalformedHeader},
		{"TimestampNotInteger", signature.Secrets{stripeSecret}, "t=soon,v1=" + good, stripeBody, stripeTime, signature.ErrMalformedHeader},
		{"SignatureNotHex", signature.Secrets{stripeSecret}, "t=1700000000,v1=zz", stripeBody, stripeTime, signature.ErrMalformedHeader},
		{"EmptySignature", signature.Secrets{stripeSecret}, "t=1700000000,v1=", stripeBody, stripeTime, signature.ErrMalformedHeader},
		{"EntryWithoutEquals", signature.Secrets{stripeSecret}, "t=1700000000,v1" + good, stripeBody, stripeTime, signature.ErrMalformedHeader},
		{"EmptyEntry", signature.Secrets{stripeSecret}, "t=1700000000,,v1=" + good, stripeBody, stripeTime, signature.ErrMalformedHeader},
		{"Garbage", signature.Secrets{stripeSecret}, "not a stripe header", stripeBody, stripeTime, signature.ErrMalformedHeader},
		{"NoSecrets", nil, "t=1700000000,v1=" + good, stripeBody, stripeTime, signature.ErrNoSecrets},
		{"EmptySecrets", signature.Secrets{"", ""}, "t=1700000000,v1=" + good, stripeBody, stripeTime, signature.ErrNoSecrets},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := signature.NewStripe(tt.secrets, at(tt.now)).Verify(ctx, stripeRequest(tt.header, tt.body))
			requireRejected(t, err, tt.want, stripeSecret, other)
		})
	}
}

func TestStripeRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const newSecret = "whsec_rolled_secret_for_rotation"
	now := time.Now()

	// During a roll Stripe signs with both secrets; either verifies alone.
	h, err := signature.SignStripe([]string{newSecret, stripeSecret}, now, []byte(stripeBody))
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(h.Get(signature.HeaderStripeSignature), "v1="))
	req := &signature.Request{Header: h, Body: []byte(stripeBody)}
	require.NoError(t, signature.NewStripe(signature.Secrets{newSecret}, nil).Verify(ctx, req))
	require.NoError(t, signature.NewStripe(signature.Secrets{stripeSecret}, nil).Verify(ctx, req))

	// A receiver holding both accepts a sender still on the old one.
	h, err = signature.SignStripe([]string{stripeSecret}, now, []byte(stripeBody))
	require.NoError(t, err)
	require.NoError(t, signature.NewStripe(signature.Secrets{newSecret, stripeSecret}, nil).Verify(ctx, &signature.Request{Header: h, Body: []byte(stripeBody)}))

	_, err = signature.SignStripe(nil, now, []byte(stripeBody))
	require.ErrorIs(t, err, signature.ErrNoSecrets)
}

func FuzzStripeVerify(f *testing.F) {
	good := stripeV1(stripeSecret, stripeTime, stripeBody)
	f.Add("t=1700000000,v1="+good, stripeBody)
	f.Add("t=1700000000,v0=00,v1="+good+",v1=", stripeBody)
	f.Add("t=,v1=", "")
	f.Add(",,=,==", "{}")
	f.Add("t=99999999999999999999999,v1=00", "")
	f.Add(" t = 1700000000 , v1 = "+good, stripeBody)
	v := signature.NewStripe(signature.Secrets{stripeSecret}, at(stripeTime))
	f.Fuzz(func(t *testing.T, header, body string) {
		// Genuine: the body, with the genuine signature among the entries.
		genuine := body == stripeBody && strings.Contains(strings.ToLower(header), good)
		requireOnlyGenuine(t, v.Verify(context.Background(), stripeRequest(header, body)), genuine, header, body)
	})
}
