package outbox

import (
	"fmt"
	"net/netip"

	"github.com/wharfhq/wharf/internal/egress"
)

// ErrBlockedAddress is matched (errors.Is) by the error of an attempt the
// SSRF guard refused to connect.
var ErrBlockedAddress = egress.ErrBlocked

// BlockedAddressError is the SSRF guard's refusal of one address.
type BlockedAddressError struct {
	// Addr is the resolved address the connection would have gone to.
	Addr netip.Addr
	// Reason names the range it is in ("loopback", "cloud metadata"…).
	Reason string
	// Private is true when Config.AllowPrivateNetworks would allow it
	// (loopback, private, shared, link-local and unique-local ranges).
	Private bool
}

// Error describes the refusal and names the switch that allows it.
func (e *BlockedAddressError) Error() string { return (*egress.Refusal)(e).Error() }

// Is matches ErrBlockedAddress.
func (e *BlockedAddressError) Is(target error) bool { return target == ErrBlockedAddress }

// checkLiteral refuses, at registration, an endpoint URL whose host the
// guard would refuse at every dial whatever DNS says (egress.CheckLiteral):
// an ErrInvalidEndpoint error holding a *BlockedAddressError.
func checkLiteral(e *egress.Client, rawURL string) error {
	if err := literalBlocked(e, rawURL); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEndpoint, err)
	}
	return nil
}

// literalBlocked returns the *BlockedAddressError of a URL the guard
// refuses whatever DNS says, otherwise nil.
func literalBlocked(e *egress.Client, rawURL string) error {
	if r := e.CheckLiteral(rawURL); r != nil {
		return (*BlockedAddressError)(r)
	}
	return nil
}
