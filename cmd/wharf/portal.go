package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/wharfhq/wharf/internal/ops"
	"github.com/wharfhq/wharf/portal"
)

// envPortalKey holds the key that signs portal tokens: the standard base64
// of at least portal.MinKeyBytes random bytes. Only the environment carries
// it: a flag would show in the process list.
const envPortalKey = "WHARF_PORTAL_KEY"

// portalKeyHelp says what $WHARF_PORTAL_KEY holds and how to make one.
var portalKeyHelp = fmt.Sprintf("the standard base64 of at least %d random bytes, the key the application's portal verifies tokens with "+
	"(make one with `openssl rand -base64 32`)", portal.MinKeyBytes)

// portalKey returns the key of $WHARF_PORTAL_KEY; its errors never quote
// the key.
func portalKey() ([]byte, error) {
	s := os.Getenv(envPortalKey)
	if s == "" {
		return nil, usageError{fmt.Sprintf("set $%s to %s", envPortalKey, portalKeyHelp)}
	}
	key, err := portal.ParseKey(s)
	if err != nil {
		return nil, usageError{fmt.Sprintf("$%s: %v; it must be %s", envPortalKey, err, portalKeyHelp)}
	}
	return key, nil
}

// runPortal is `wharf portal`: it mints tokens and links for the tenant
// portal, and needs no database.
func runPortal(_ context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usageError{"want token or link"}
	}
	switch args[0] {
	case "token":
		return runPortalToken(e, args[1:])
	case "link":
		return runPortalLink(e, args[1:])
	}
	return usageError{fmt.Sprintf("unknown portal command %q: want token or link", args[0])}
}

// portalFlags are the flags of a token: who it is for, how long it lives
// and whether it only reads.
type portalFlags struct {
	tenant   *string
	ttl      *time.Duration
	readOnly *bool
}

func declarePortalFlags(fs *flag.FlagSet, ttl time.Duration) *portalFlags {
	return &portalFlags{
		tenant:   fs.String("tenant", "", "the tenant whose endpoints and deliveries the token grants (required)"),
		ttl:      duration(fs, "ttl", ttl, fmt.Sprintf("how long the token works, at most %s", ops.Duration(portal.MaxTokenTTL))),
		readOnly: fs.Bool("read-only", false, "grant reading only: the portal refuses every change"),
	}
}

// token checks the flags and the key, and returns the token they ask for
// (expiring ttl from now) with the key to sign it.
func (p *portalFlags) token() ([]byte, portal.Token, error) {
	switch {
	case *p.tenant == "":
		return nil, portal.Token{}, usageError{"-tenant is required: the tenant the token grants"}
	case *p.ttl <= 0:
		return nil, portal.Token{}, usageError{"-ttl must be positive"}
	case *p.ttl < time.Second:
		// A token's expiry is in whole seconds: it would expire at once.
		return nil, portal.Token{}, usageError{"-ttl must be at least 1s"}
	case *p.ttl > portal.MaxTokenTTL:
		return nil, portal.Token{}, usageError{fmt.Sprintf("-ttl %s is too long: a token lives at most %s", ops.Duration(*p.ttl), ops.Duration(portal.MaxTokenTTL))}
	}
	key, err := portalKey()
	if err != nil {
		return nil, portal.Token{}, err
	}
	t := portal.Token{Tenant: *p.tenant, Expires: time.Now().Add(*p.ttl), ReadOnly: *p.readOnly}
	// The key and the TTL are checked: what NewToken refuses now is the
	// tenant.
	if _, err := portal.NewToken(key, t); err != nil {
		return nil, portal.Token{}, usageError{fmt.Sprintf("-tenant %q: %v", *p.tenant, err)}
	}
	return key, t, nil
}

// grants writes what a token grants, for the operator (stderr).
func (p *portalFlags) grants(t portal.Token) string {
	access := "read and write"
	if t.ReadOnly {
		access = "read-only"
	}
	return fmt.Sprintf("tenant %q, %s, expires %s (in %s)", t.Tenant, access, t.Expires.UTC().Format(time.RFC3339), ops.Duration(*p.ttl))
}

// portalUsage sets fs's usage: synopsis, what the command prints, and
// where the key comes from.
func portalUsage(e *env, fs *flag.FlagSet, synopsis, what string) {
	fs.Usage = func() {
		fmt.Fprintf(e.errOut, "usage: wharf %s %s\n\n%s\n\n"+
			"The key comes from $%s, never a flag: the standard base64 of at least %d\n"+
			"random bytes (make one with `openssl rand -base64 32`), the key the application's portal\n"+
			"verifies tokens with. It is never printed. No database is needed.\n\nflags:\n",
			fs.Name(), synopsis, what, envPortalKey, portal.MinKeyBytes)
		fs.PrintDefaults()
	}
}

// runPortalToken is `wharf portal token`.
func runPortalToken(e *env, args []string) error {
	fs := newFlagSet(e, "portal token", "")
	p := declarePortalFlags(fs, time.Hour)
	portalUsage(e, fs, "-tenant T [-ttl 1h] [-read-only]",
		"Prints a bearer token for the tenant portal, on one line: the tenant's client sends it as\n"+
			"`Authorization: Bearer <token>`. Anyone holding it holds the tenant's access until it expires.")
	if rest, err := parseInterleaved(fs, args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", rest[0])}
	}
	key, t, err := p.token()
	if err != nil {
		return err
	}
	token, err := portal.NewToken(key, t)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.out, token)
	fmt.Fprintf(e.errOut, "token for %s\n", p.grants(t))
	return nil
}

// runPortalLink is `wharf portal link`.
func runPortalLink(e *env, args []string) error {
	fs := newFlagSet(e, "portal link", "")
	base := fs.String("base", "", "the portal's URL as the tenant's browser reaches it, such as https://app.example.com/portal/ (required)")
	p := declarePortalFlags(fs, 15*time.Minute)
	portalUsage(e, fs, "-tenant T -base URL [-ttl 15m] [-read-only]",
		"Prints a magic link to the tenant portal, on one line: base with a token in its query.\n"+
			"Opening it trades the token for a cookie. Anyone holding the link holds the tenant's access\n"+
			"until it expires: keep -ttl short and send the link only over HTTPS.")
	if rest, err := parseInterleaved(fs, args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", rest[0])}
	}
	if *base == "" {
		return usageError{"-base is required: the portal's URL, such as https://app.example.com/portal/"}
	}
	key, t, err := p.token()
	if err != nil {
		return err
	}
	// The key, tenant and TTL are checked: what NewLink refuses now is
	// the base.
	link, err := portal.NewLink(key, *base, t)
	if err != nil {
		return usageError{fmt.Sprintf("-base: %v", err)}
	}
	fmt.Fprintln(e.out, link)
	fmt.Fprintf(e.errOut, "link for %s\n", p.grants(t))
	return nil
}
