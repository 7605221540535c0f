package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/portal"
)

// portalTestKey is the key the portal tests sign with.
var portalTestKey = bytes.Repeat([]byte{7}, 32)

// portalClaims checks that token is a portal token signed with key
// (portal's format: "wpt_" BODY "." HMAC-SHA256 over a domain label and
// BODY, both base64url) and returns its claims.
func portalClaims(t *testing.T, key []byte, token string) map[string]any {
	t.Helper()
	rest, ok := strings.CutPrefix(token, "wpt_")
	require.True(t, ok, "prefix: %q", token)
	body, sig, ok := strings.Cut(rest, ".")
	require.True(t, ok, "two dot-separated parts: %q", token)
	require.NotContains(t, sig, ".")
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	require.NoError(t, err)
	h := hmac.New(sha256.New, key)
	h.Write([]byte("wharf-portal-token\x00"))
	h.Write([]byte(body))
	require.True(t, hmac.Equal(h.Sum(nil), mac), "signed with the key of $WHARF_PORTAL_KEY")
	payload, err := base64.RawURLEncoding.DecodeString(body)
	require.NoError(t, err)
	var claims map[string]any
	require.NoError(t, json.Unmarshal(payload, &claims))
	return claims
}

// requireExpiresIn checks that claims' exp is ttl from now (to the second).
func requireExpiresIn(t *testing.T, claims map[string]any, ttl time.Duration, minted time.Time) {
	t.Helper()
	exp, ok := claims["exp"].(float64)
	require.True(t, ok, "exp: %v", claims["exp"])
	require.GreaterOrEqual(t, int64(exp), minted.Add(ttl).Unix()-1)
	require.LessOrEqual(t, int64(exp), time.Now().Add(ttl).Unix())
}

// `wharf portal token` prints one line, a token signed with
// $WHARF_PORTAL_KEY for the tenant, expiring -ttl from now, read-only with
// -read-only; no database is needed and the key is never printed. Not
// parallel: it sets the environment.
func TestPortalToken(t *testing.T) {
	t.Setenv(envPortalKey, " "+base64.StdEncoding.EncodeToString(portalTestKey)+"\n")
	keyText := base64.StdEncoding.EncodeToString(portalTestKey)

	minted := time.Now()
	code, out, errOut := cli(t, "-database-url", "", "portal", "token", "-tenant", "acme")
	require.Equal(t, 0, code, errOut)
	require.True(t, strings.HasSuffix(out, "\n"))
	require.Equal(t, 1, strings.Count(out, "\n"), "one line: %q", out)
	claims := portalClaims(t, portalTestKey, strings.TrimSpace(out))
	require.Equal(t, "acme", claims["tenant"])
	require.NotContains(t, claims, "ro", "read and write by default")
	requireExpiresIn(t, claims, time.Hour, minted)
	require.Contains(t, errOut, `tenant "acme", read and write, expires `)
	require.NotContains(t, out+errOut, keyText[:12])

	// Flags after each other in any order; days, as every CLI duration.
	minted = time.Now()
	code, out, errOut = cli(t, "portal", "token", "-read-only", "-ttl", "7d", "-tenant", "tenant 42")
	require.Equal(t, 0, code, errOut)
	claims = portalClaims(t, portalTestKey, strings.TrimSpace(out))
	require.Equal(t, "tenant 42", claims["tenant"])
	require.Equal(t, true, claims["ro"])
	requireExpiresIn(t, claims, 7*24*time.Hour, minted)
	require.Contains(t, errOut, "read-only")
	require.Contains(t, errOut, "(in 7d)")

	// The longest TTL is accepted.
	code, _, errOut = cli(t, "portal", "token", "-tenant", "acme", "-ttl", "30d")
	require.Equal(t, 0, code, errOut)
}

// `wharf portal link` prints the base with a token for the tenant in its
// query, the token signed with $WHARF_PORTAL_KEY and expiring -ttl (15m by
// default) from now.
func TestPortalLink(t *testing.T) {
	t.Setenv(envPortalKey, base64.StdEncoding.EncodeToString(portalTestKey))
	const base = "https://app.example.com/portal/"

	minted := time.Now()
	code, out, errOut := cli(t, "portal", "link", "-tenant", "acme", "-base", base)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, 1, strings.Count(out, "\n"), "one line: %q", out)
	link := strings.TrimSpace(out)
	require.True(t, strings.HasPrefix(link, base+"?"), link)
	u, err := url.Parse(link)
	require.NoError(t, err)
	require.Equal(t, "app.example.com", u.Host)
	require.Equal(t, "/portal/", u.Path)
	token := u.Query().Get("token")
	require.NotEmpty(t, token, link)
	claims := portalClaims(t, portalTestKey, token)
	require.Equal(t, "acme", claims["tenant"])
	require.NotContains(t, claims, "ro")
	requireExpiresIn(t, claims, 15*time.Minute, minted)

	// The base's own query is kept; -read-only and -ttl as for token.
	minted = time.Now()
	code, out, errOut = cli(t, "portal", "link", "-tenant", "acme", "-base", "http://localhost:8080/portal?lang=de", "-ttl", "2h", "-read-only")
	require.Equal(t, 0, code, errOut)
	u, err = url.Parse(strings.TrimSpace(out))
	require.NoError(t, err)
	require.Equal(t, "de", u.Query().Get("lang"))
	claims = portalClaims(t, portalTestKey, u.Query().Get("token"))
	require.Equal(t, true, claims["ro"])
	requireExpiresIn(t, claims, 2*time.Hour, minted)

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"-tenant", "acme"}, "-base is required"},
		{[]string{"-tenant", "acme", "-base", "/portal/"}, `-base: the base "/portal/" is not an absolute http or https URL`},
		{[]string{"-tenant", "acme", "-base", "ftp://example.com/portal/"}, `-base: the base "ftp://example.com/portal/" is not an absolute`},
		{[]string{"-base", base}, "-tenant is required"},
		{[]string{"-tenant", "acme", "-base", base, "-ttl", "31d"}, "-ttl 31d is too long: a token lives at most 30d"},
	} {
		code, out, errOut := cli(t, append([]string{"portal", "link"}, bad.args...)...)
		require.Equal(t, 2, code, "%v: %s", bad.args, errOut)
		require.Empty(t, out, bad.args)
		require.Contains(t, errOut, "wharf portal: "+bad.want, bad.args)
	}
}

// The portal commands refuse a missing or bad key, naming
// $WHARF_PORTAL_KEY and how to make one, without printing it; a missing
// tenant, a TTL that is not positive or too long, and a bad tenant are
// refused naming the flag. All exit 2, as other mistakes in the command
// line.
func TestPortalErrors(t *testing.T) {
	good := base64.StdEncoding.EncodeToString(portalTestKey)
	short := base64.StdEncoding.EncodeToString(portalTestKey[:31])
	for _, tc := range []struct {
		name, key string
		args      []string
		want      []string
	}{
		{"no key", "", []string{"token", "-tenant", "acme"},
			[]string{"wharf portal: set $WHARF_PORTAL_KEY to the standard base64 of at least 32 random bytes", "`openssl rand -base64 32`"}},
		{"no key, link", "", []string{"link", "-tenant", "acme", "-base", "https://a.example/portal/"},
			[]string{"set $WHARF_PORTAL_KEY", "`openssl rand -base64 32`"}},
		{"short key", short, []string{"token", "-tenant", "acme"},
			[]string{"wharf portal: $WHARF_PORTAL_KEY: invalid key: 31 bytes, at least 32 are needed", "`openssl rand -base64 32`"}},
		{"not base64", "not base64!" + good, []string{"token", "-tenant", "acme"},
			[]string{"wharf portal: $WHARF_PORTAL_KEY: invalid key: not standard base64", "`openssl rand -base64 32`"}},
		{"url base64", strings.NewReplacer("+", "-", "/", "_").Replace(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb, 0xff}, 16))),
			[]string{"token", "-tenant", "acme"}, []string{"$WHARF_PORTAL_KEY: invalid key: not standard base64"}},
		{"no tenant", good, []string{"token"}, []string{"wharf portal: -tenant is required"}},
		{"empty tenant", good, []string{"token", "-tenant", "", "-ttl", "1h"}, []string{"-tenant is required"}},
		{"bad tenant", good, []string{"token", "-tenant", "a\nb"}, []string{`wharf portal: -tenant "a\nb": a tenant is 1 to 256 bytes`}},
		{"long tenant", good, []string{"token", "-tenant", strings.Repeat("t", 257)}, []string{"a tenant is 1 to 256 bytes"}},
		{"ttl too long", good, []string{"token", "-tenant", "acme", "-ttl", "30d1s"}, []string{"wharf portal: -ttl 30d1s is too long: a token lives at most 30d"}},
		{"ttl too long, hours", good, []string{"token", "-tenant", "acme", "-ttl", "1000h"}, []string{"-ttl 41d16h is too long: a token lives at most 30d"}},
		{"ttl zero", good, []string{"token", "-tenant", "acme", "-ttl", "0"}, []string{"wharf portal: -ttl must be positive"}},
		{"ttl under a second", good, []string{"token", "-tenant", "acme", "-ttl", "500ms"}, []string{"-ttl must be at least 1s"}},
		{"ttl negative", good, []string{"token", "-tenant", "acme", "-ttl", "-1h"}, []string{`invalid value "-1h" for flag -ttl`}},
		{"ttl not a duration", good, []string{"token", "-tenant", "acme", "-ttl", "soon"}, []string{`invalid value "soon" for flag -ttl`}},
		{"argument", good, []string{"token", "-tenant", "acme", "extra"}, []string{`unexpected argument "extra"`}},
		{"unknown flag", good, []string{"token", "-tenant", "acme", "-key", good}, []string{"flag provided but not defined: -key"}},
		{"unknown command", good, []string{"revoke"}, []string{`unknown portal command "revoke": want token or link`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envPortalKey, tc.key)
			code, out, errOut := cli(t, append([]string{"-database-url", "", "portal"}, tc.args...)...)
			require.Equal(t, 2, code, errOut)
			require.Empty(t, out)
			for _, want := range tc.want {
				require.Contains(t, errOut, want)
			}
			require.NotContains(t, errOut, "portal: portal:", "the package prefix is dropped")
			if len(tc.key) > 12 {
				require.NotContains(t, errOut, tc.key[len(tc.key)-12:], "the key was printed")
			}
			require.NotContains(t, errOut, good[:12], "the key was printed")
		})
	}
}

// -h and help print each portal command's usage and flags, exiting 0,
// without a key or a database; `wharf portal` alone prints the group's
// usage and exits 2. Not parallel: it sets the environment.
func TestPortalHelp(t *testing.T) {
	t.Setenv(envPortalKey, "")
	for _, args := range [][]string{
		{"portal", "token", "-h"},
		{"portal", "token", "-tenant", "acme", "-help"},
		{"help", "portal", "token"},
	} {
		code, out, errOut := cli(t, args...)
		require.Equal(t, 0, code, "%v: %s", args, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, "usage: wharf portal token -tenant T [-ttl 1h] [-read-only]", args)
		require.Contains(t, errOut, "Authorization: Bearer <token>", args)
		require.Contains(t, errOut, "$WHARF_PORTAL_KEY", args)
		require.Contains(t, errOut, "openssl rand -base64 32", args)
		require.Contains(t, errOut, "-read-only", args)
		require.Contains(t, errOut, "-ttl duration", args)
		require.Contains(t, errOut, "(default 1h", args)
	}
	for _, args := range [][]string{{"portal", "link", "-h"}, {"help", "portal", "link"}} {
		code, out, errOut := cli(t, args...)
		require.Equal(t, 0, code, "%v: %s", args, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, "usage: wharf portal link -tenant T -base URL [-ttl 15m] [-read-only]", args)
		require.Contains(t, errOut, "-base", args)
		require.Contains(t, errOut, "(default 15m", args)
	}
	for _, args := range [][]string{{"portal", "-h"}, {"help", "portal"}} {
		code, _, errOut := cli(t, args...)
		require.Equal(t, 0, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "usage: wharf portal token|link", args)
	}
	code, _, errOut := cli(t, "portal")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "usage: wharf portal token|link")

	// The command list names the group.
	code, _, errOut = cli(t, "help")
	require.Equal(t, 0, code)
	require.Contains(t, errOut, "  portal token|link -tenant T")
	code, _, errOut = cli(t)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "  portal token|link -tenant T")
}

// The CLI's key checks agree with the library's: a key ParseKey accepts
// mints a token the CLI's structure check accepts, and the TTL limit is
// the library's.
func TestPortalLibraryAgrees(t *testing.T) {
	t.Parallel()
	key, err := portal.ParseKey(base64.StdEncoding.EncodeToString(portalTestKey))
	require.NoError(t, err)
	token, err := portal.NewToken(key, portal.Token{Tenant: "acme", Expires: time.Now().Add(time.Hour), ReadOnly: true})
	require.NoError(t, err)
	claims := portalClaims(t, portalTestKey, token)
	require.Equal(t, "acme", claims["tenant"])
	require.Equal(t, true, claims["ro"])
	require.Equal(t, 30*24*time.Hour, portal.MaxTokenTTL, "the error messages' 30d")
}
