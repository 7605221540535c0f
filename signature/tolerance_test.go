package signature_test

import (
	"context"
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
					require.ErrorIs(t, err, signature.ErrNoSecrets, "a receiving-side problem, as the inbox expects")
					require.ErrorContains(t, err, "only -1 disables")
				}
			}

			// A positive tolerance still applies.
			require.NoError(t, v.verify(&signature.Options{Tolerance: time.Minute, Now: clock(v.signed + 59)}))
			require.ErrorIs(t, v.verify(&signature.Options{Tolerance: time.Minute, Now: clock(v.signed + 61)}), signature.ErrStaleTimestamp)
		})
	}
}
