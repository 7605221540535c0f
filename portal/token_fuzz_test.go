package portal

import (
	"bytes"
	"testing"
	"time"
)

// FuzzParseToken: a bearer token or link token comes from the network. No
// input panics; one that parses was signed by the key (so it is one
// NewToken made: the seeds') and names a tenant NewToken accepts.
func FuzzParseToken(f *testing.F) {
	key := bytes.Repeat([]byte("f"), MinKeyBytes)
	now := time.Unix(1_800_000_000, 0)
	good, err := newToken(key, Token{Tenant: "acme", Expires: now.Add(time.Hour)}, now)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add("wpt_.")
	f.Add("wpt_eyJ0ZW5hbnQiOiJ4IiwiZXhwIjo5OTk5OTk5OTk5fQ.AAAA")
	f.Add("")
	f.Fuzz(func(t *testing.T, token string) {
		got, err := parseToken([][]byte{key}, token, now)
		if err != nil {
			return
		}
		if checkTenant(got.Tenant) != nil || !got.Expires.After(now) {
			t.Fatalf("accepted %q: %+v", token, got)
		}
		if _, err := newToken(key, *got, now); err != nil {
			t.Fatalf("accepted %q, which NewToken could not have made: %v", token, err)
		}
	})
}
