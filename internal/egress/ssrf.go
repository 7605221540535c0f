package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
)

// ErrBlocked is matched (errors.Is) by the error of a request the SSRF
// guard refused to connect (outbox.ErrBlockedAddress).
var ErrBlocked = errors.New("outbox: address blocked by SSRF guard")

// Refusal is the SSRF guard's refusal of one address; outbox's
// BlockedAddressError has its fields, and its text.
type Refusal struct {
	// Addr is the resolved address the connection would have gone to.
	Addr netip.Addr
	// Reason names the range it is in ("loopback", "cloud metadata"…).
	Reason string
	// Private is true when Config.AllowPrivateNetworks would allow it
	// (loopback, private, shared, link-local and unique-local ranges).
	Private bool
}

// Error describes the refusal and names the switch that allows it.
func (e *Refusal) Error() string {
	if e.Private {
		return fmt.Sprintf("outbox: refused to connect to %s (%s); set Config.AllowPrivateNetworks to allow private and loopback addresses (a development setup), or list the network in Config.AllowedNetworks", e.Addr, e.Reason)
	}
	return fmt.Sprintf("outbox: refused to connect to %s (%s); only listing it in Config.AllowedNetworks allows it", e.Addr, e.Reason)
}

// Is matches ErrBlocked.
func (e *Refusal) Is(target error) bool { return target == ErrBlocked }

// addressClass is whether the SSRF guard may let a class through when the
// application allows private networks.
type addressClass struct {
	reason  string
	private bool // allowed by Config.AllowPrivateNetworks
}

var (
	classMetadata    = addressClass{reason: "cloud metadata"}
	classLoopback    = addressClass{reason: "loopback", private: true}
	classPrivate     = addressClass{reason: "private", private: true}
	classShared      = addressClass{reason: "shared address space", private: true}
	classLinkLocal   = addressClass{reason: "link-local", private: true}
	classUniqueLocal = addressClass{reason: "unique-local", private: true}
	classUnspecified = addressClass{reason: "unspecified"}
	classMulticast   = addressClass{reason: "multicast"}
	classReserved    = addressClass{reason: "reserved"}
)

// metadataPrefixes are cloud providers' instance metadata and host agent
// services, refused even when private networks are allowed.
var metadataPrefixes = []netip.Prefix{
	netip.MustParsePrefix("169.254.169.0/24"),   // AWS, GCP, Azure IMDS, OpenStack, Oracle; AWS DNS and NTP (.253, .123)
	netip.MustParsePrefix("169.254.170.2/32"),   // AWS ECS task metadata
	netip.MustParsePrefix("168.63.129.16/32"),   // Azure WireServer (host agent, DNS)
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud
	netip.MustParsePrefix("fd00:ec2::254/128"),  // AWS over IPv6
	netip.MustParsePrefix("fd00:ec2::253/128"),  // AWS DNS over IPv6
}

// reservedPrefixes are non-public ranges netip's predicates do not name.
var reservedPrefixes = []struct {
	prefix netip.Prefix
	class  addressClass
}{
	{netip.MustParsePrefix("0.0.0.0/8"), classUnspecified},    // "this network"
	{netip.MustParsePrefix("100.64.0.0/10"), classShared},     // carrier-grade NAT
	{netip.MustParsePrefix("192.0.0.0/24"), classReserved},    // IETF protocol assignments
	{netip.MustParsePrefix("192.0.2.0/24"), classReserved},    // documentation
	{netip.MustParsePrefix("192.88.99.0/24"), classReserved},  // 6to4 relay anycast
	{netip.MustParsePrefix("198.18.0.0/15"), classReserved},   // benchmarking
	{netip.MustParsePrefix("198.51.100.0/24"), classReserved}, // documentation
	{netip.MustParsePrefix("203.0.113.0/24"), classReserved},  // documentation
	{netip.MustParsePrefix("240.0.0.0/4"), classReserved},     // future use, broadcast
	{netip.MustParsePrefix("::/96"), classReserved},           // IPv4-compatible (deprecated)
	{netip.MustParsePrefix("::ffff:0:0:0/96"), classReserved}, // IPv4-translated
	{netip.MustParsePrefix("64:ff9b:1::/48"), classReserved},  // local-use NAT64
	{netip.MustParsePrefix("100::/64"), classReserved},        // discard-only
	{netip.MustParsePrefix("2001::/23"), classReserved},       // IETF protocol assignments, Teredo
	{netip.MustParsePrefix("2001:db8::/32"), classReserved},   // documentation
	{netip.MustParsePrefix("3fff::/20"), classReserved},       // documentation
	{netip.MustParsePrefix("5f00::/16"), classReserved},       // SRv6 SIDs
	{netip.MustParsePrefix("fec0::/10"), classReserved},       // site-local (deprecated)
}

// guard decides which resolved addresses requests may connect to.
type guard struct {
	allowPrivate bool
	allowed      []netip.Prefix
}

// check returns nil when a connection to addr is allowed, otherwise its
// *Refusal.
func (g *guard) check(addr netip.Addr) error {
	addr = addr.WithZone("")
	if g.allowListed(addr) || g.allowListed(addr.Unmap()) {
		return nil
	}
	class, blocked := classify(addr)
	if !blocked || (class.private && g.allowPrivate) {
		return nil
	}
	return &Refusal{Addr: addr, Reason: class.reason, Private: class.private}
}

func (g *guard) allowListed(addr netip.Addr) bool {
	for _, p := range g.allowed {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// classify returns the class of a non-public address, and false for a
// public one. IPv6 forms that embed an IPv4 address (mapped, NAT64, 6to4)
// are judged by the IPv4 address.
func classify(addr netip.Addr) (addressClass, bool) {
	if !addr.IsValid() {
		return classReserved, true
	}
	addr = addr.Unmap()
	if embedded, ok := embeddedIPv4(addr); ok {
		return classify(embedded)
	}
	for _, m := range metadataPrefixes {
		if m.Contains(addr) {
			return classMetadata, true
		}
	}
	switch {
	case addr.IsUnspecified():
		return classUnspecified, true
	case addr.IsLoopback():
		return classLoopback, true
	case addr.IsMulticast():
		return classMulticast, true
	case addr.IsLinkLocalUnicast():
		return classLinkLocal, true
	case addr.Is4() && addr.IsPrivate():
		return classPrivate, true
	case addr.Is6() && addr.IsPrivate():
		return classUniqueLocal, true
	}
	for _, r := range reservedPrefixes {
		if r.prefix.Contains(addr) {
			return r.class, true
		}
	}
	return addressClass{}, false
}

var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// embeddedIPv4 returns the IPv4 address a NAT64 or 6to4 address leads to.
func embeddedIPv4(addr netip.Addr) (netip.Addr, bool) {
	if !addr.Is6() {
		return netip.Addr{}, false
	}
	b := addr.As16()
	switch {
	case nat64Prefix.Contains(addr):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case sixToFour.Contains(addr):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

// guardDialer returns a copy of d whose connections are checked by g at
// dial time, after name resolution: a host that resolves to a refused
// address (DNS rebinding included) is refused before any packet is sent to
// it. d's own Control or ControlContext runs after g accepted.
func guardDialer(d *net.Dialer, g *guard) *net.Dialer {
	guarded := *d
	inner, innerCtx := d.Control, d.ControlContext
	guarded.Control = nil
	guarded.ControlContext = func(ctx context.Context, network, address string, c syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &Refusal{Reason: "unparseable address " + address}
		}
		if err := g.check(ap.Addr()); err != nil {
			return err
		}
		switch {
		case innerCtx != nil:
			return innerCtx(ctx, network, address, c)
		case inner != nil:
			return inner(network, address, c)
		}
		return nil
	}
	return &guarded
}

// CheckLiteral returns the refusal of an endpoint or token URL whose host
// the guard would refuse at every dial whatever DNS says: an IP address in
// a refused range, or localhost (and names under .localhost, which resolve
// to loopback); nil otherwise. A hostname is judged only when a request
// dials it. The outbox refuses such URLs at registration.
func (c *Client) CheckLiteral(rawURL string) *Refusal {
	r, _ := c.guard.literal(rawURL).(*Refusal)
	return r
}

// literal returns the *Refusal of CheckLiteral, or nil.
func (g *guard) literal(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil // the outbox's URL check reports it
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	addr, err := netip.ParseAddr(host)
	if err != nil {
		if host != "localhost" && !strings.HasSuffix(host, ".localhost") {
			return nil
		}
		addr = netip.MustParseAddr("127.0.0.1")
	}
	return g.check(addr)
}
