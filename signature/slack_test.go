package signature_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/signature"
)

// Slack's published vector (api.slack.com, "Verifying requests from Slack").
const (
	slackSecret    = "8f742231b10e8888abcd99yyyzzz85a5"
	slackTimestamp = int64(1531420618)
	slackBody      = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	slackSignature = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
)

func slackRequest(ts, sig, body string) *signature.Request {
	return newRequest(body, signature.HeaderSlackTimestamp, ts, signature.HeaderSlackSignature, sig)
}

func TestSlackPublishedVector(t *testing.T) {
	t.Parallel()
	v := signature.NewSlack(signature.Secrets{slackSecret}, at(slackTimestamp))
	require.NoError(t, v.Verify(context.Background(), slackRequest("1531420618", slackSignature, slackBody)))

	loc := v.EventLocation()
	require.Equal(t, signature.EventLocation{IDField: "event_id", TypeField: "event.type",
		SignedHeaders: []string{signature.HeaderSlackTimestamp}}, loc)
}

func TestSlackRejects(t *testing.T) {
	t.Parallel()
	const other = "0000000000000000aaaabbbbccccdddd"
	tests := []struct {
		name    string
		secrets signature.Secrets
		ts      string
		sig     string
		body    string
		now     int64
		want    error
	}{
		{"TamperedBody", signature.Secrets{slackSecret}, "1531420618", slackSignature, slackBody + "&x=1", slackTimestamp, signature.ErrNoMatch},
		{"TamperedTimestamp", signature.Secrets{slackSecret}, "1531420619", slackSignature, slackBody, slackTimestamp, signature.ErrNoMatch},
		{"WrongSecret", signature.Secrets{other}, "1531420618", slackSignature, slackBody, slackTimestamp, signature.ErrNoMatch},
		{"Stale", signature.Secrets{slackSecret}, "1531420618", slackSignature, slackBody, slackTimestamp + 301, signature.ErrStaleTimestamp},
		{"Future", signature.Secrets{slackSecret}, "1531420618", slackSignature, slackBody, slackTimestamp - 301, signature.ErrStaleTimestamp},
		{"MissingSignature", signature.Secrets{slackSecret}, "1531420618", "", slackBody, slackTimestamp, signature.ErrMissingHeader},
		{"MissingTimestamp", signature.Secrets{slackSecret}, "", slackSignature, slackBody, slackTimestamp, signature.ErrMissingHeader},
		{"TimestampNotInteger", signature.Secrets{slackSecret}, "1531420618.5", slackSignature, slackBody, slackTimestamp, signature.ErrMalformedHeader},
		{"UnknownVersion", signature.Secrets{slackSecret}, "1531420618", "v1=" + slackSignature[3:], slackBody, slackTimestamp, signature.ErrMalformedHeader},
		{"NotHex", signature.Secrets{slackSecret}, "1531420618", "v0=nothex", slackBody, slackTimestamp, signature.ErrMalformedHeader},
		{"EmptySecrets", signature.Secrets{""}, "1531420618", slackSignature, slackBody, slackTimestamp, signature.ErrNoSecrets},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := signature.NewSlack(tt.secrets, at(tt.now)).Verify(context.Background(), slackRequest(tt.ts, tt.sig, tt.body))
			requireRejected(t, err, tt.want, slackSecret, other)
		})
	}
}

func FuzzSlackVerify(f *testing.F) {
	f.Add("1531420618", slackSignature, slackBody)
	f.Add("", "", "")
	f.Add("-1", "v0=", "{}")
	f.Add("1531420618 ", "v0=v0=00", "a")
	v := signature.NewSlack(signature.Secrets{slackSecret}, at(slackTimestamp))
	f.Fuzz(func(t *testing.T, ts, sig, body string) {
		genuine := ts == "1531420618" && body == slackBody
		requireOnlyGenuine(t, v.Verify(context.Background(), slackRequest(ts, sig, body)), genuine, ts, sig, body)
	})
}
