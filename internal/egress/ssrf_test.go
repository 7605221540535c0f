package egress

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSSRFGuardCheck(t *testing.T) {
	t.Parallel()

	cases := []struct {
		addr   string
		reason string // "" means public
	}{
		{"127.0.0.1", "loopback"},
		{"127.1.2.3", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"2002:7f00:1::", "loopback"}, // 6to4 of 127.0.0.1
		{"10.0.0.1", "private"},
		{"172.16.5.4", "private"},
		{"192.168.1.1", "private"},
		{"::ffff:10.0.0.1", "private"},
		{"64:ff9b::a00:1", "private"}, // NAT64 of 10.0.0.1
		{"100.64.0.1", "shared address space"},
		{"169.254.169.254", "cloud metadata"},
		{"::ffff:169.254.169.254", "cloud metadata"},
		{"::ffff:a9fe:a9fe", "cloud metadata"},
		{"64:ff9b::a9fe:a9fe", "cloud metadata"},
		{"fd00:ec2::254", "cloud metadata"},
		{"169.254.169.1", "cloud metadata"},   // all of 169.254.169.0/24
		{"169.254.169.123", "cloud metadata"}, // AWS time sync
		{"169.254.169.255", "cloud metadata"},
		{"168.63.129.16", "cloud metadata"}, // Azure WireServer, a public address
		{"::ffff:168.63.129.16", "cloud metadata"},
		{"168.63.129.17", ""},
		{"169.254.168.255", "link-local"},
		{"169.254.170.1", "link-local"},
		{"169.254.1.1", "link-local"},
		{"fe80::1", "link-local"},
		{"fc00::1", "unique-local"},
		{"fd12:3456::1", "unique-local"},
		{"224.0.0.1", "multicast"},
		{"ff02::1", "multicast"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"::", "unspecified"},
		{"255.255.255.255", "reserved"},
		{"240.0.0.1", "reserved"},
		{"192.0.2.1", "reserved"},
		{"2001::1", "reserved"}, // Teredo
		{"2001:db8::1", "reserved"},
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"2606:4700:4700::1111", ""},
		{"::ffff:8.8.8.8", ""},
	}
	strict := &guard{}
	for _, c := range cases {
		err := strict.check(netip.MustParseAddr(c.addr))
		if c.reason == "" {
			require.NoError(t, err, c.addr)
			continue
		}
		var blocked *Refusal
		require.ErrorAs(t, err, &blocked, c.addr)
		require.ErrorIs(t, err, ErrBlocked)
		require.Equal(t, c.reason, blocked.Reason, c.addr)
	}

	// The error names the switch that fixes it.
	require.ErrorContains(t, strict.check(netip.MustParseAddr("127.0.0.1")), "set Config.AllowPrivateNetworks")
	require.ErrorContains(t, strict.check(netip.MustParseAddr("169.254.169.254")), "only listing it in Config.AllowedNetworks")

	private := &guard{allowPrivate: true}
	for _, allowed := range []string{"127.0.0.1", "::1", "10.0.0.1", "fd12::1", "169.254.1.1", "100.64.0.1"} {
		require.NoError(t, private.check(netip.MustParseAddr(allowed)), allowed)
	}
	for _, refused := range []string{"169.254.169.254", "169.254.169.7", "168.63.129.16", "fd00:ec2::254", "::ffff:169.254.169.254", "0.0.0.0", "224.0.0.1"} {
		require.ErrorIs(t, private.check(netip.MustParseAddr(refused)), ErrBlocked, refused)
	}

	listed := &guard{allowed: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("169.254.169.254/32"), netip.MustParsePrefix("168.63.129.16/32")}}
	require.NoError(t, listed.check(netip.MustParseAddr("10.1.2.3")))
	require.NoError(t, listed.check(netip.MustParseAddr("::ffff:10.1.2.3")))
	require.NoError(t, listed.check(netip.MustParseAddr("169.254.169.254")))
	require.NoError(t, listed.check(netip.MustParseAddr("168.63.129.16")))
	require.ErrorIs(t, listed.check(netip.MustParseAddr("169.254.169.253")), ErrBlocked, "only the listed metadata address")
	require.ErrorIs(t, listed.check(netip.MustParseAddr("10.2.0.1")), ErrBlocked)
}

// TestSSRFGuardDial checks the guard at the transport: a refused address
// never reaches the dialer's own Control, which runs just before connect(2),
// so no packet is sent. The inner Control refuses too, so a broken guard
// fails the test without sending anything either.
func TestSSRFGuardDial(t *testing.T) {
	t.Parallel()
	var reached []string
	errInner := errors.New("inner control reached")
	client := New(&Config{Dialer: &net.Dialer{
		Timeout: time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			reached = append(reached, address)
			return errInner
		},
	}}).http

	for _, url := range []string{
		"http://127.0.0.1:9/",
		"http://10.0.0.1:9/",
		"http://169.254.169.254/latest/meta-data/",
		"http://[::1]:9/",
		"http://[::ffff:127.0.0.1]:9/",
		"http://localhost:9/",
	} {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		if resp != nil {
			_ = resp.Body.Close()
		}
		require.ErrorIs(t, err, ErrBlocked, url)
	}
	require.Empty(t, reached)
}
