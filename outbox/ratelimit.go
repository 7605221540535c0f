package outbox

import (
	"fmt"
	"math"
)

// Bounds of an endpoint's rate limit.
const (
	maxRatePerSecond = 1_000_000
	maxRateBurst     = 1_000_000
)

// RateLimit caps how fast deliveries go to an endpoint: a token bucket of
// Burst tokens refilled at PerSecond, shared by every process that
// delivers (it lives in Postgres). It holds beside the endpoint's
// MaxInFlight; a delivery that must wait for a token is snoozed without
// using an attempt.
type RateLimit struct {
	// PerSecond is the sustained rate in requests per second, more than 0
	// and at most 1,000,000; fractions are fine (0.5 is one request every
	// two seconds).
	PerSecond float64
	// Burst is how many requests may go at once after a quiet spell, 1 to
	// 1,000,000. Defaults to 1: requests evenly spaced, 1/PerSecond apart.
	Burst int
}

// String describes the limit, as "10/s burst 20".
func (r *RateLimit) String() string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("%g/s burst %d", r.PerSecond, r.Burst)
}

// checkRateLimit validates a rate limit and returns it as stored: 0 and 0
// for none (nil or the zero RateLimit).
func checkRateLimit(r *RateLimit) (perSecond float64, burst int32, err error) {
	if r == nil || *r == (RateLimit{}) {
		return 0, 0, nil
	}
	if math.IsNaN(r.PerSecond) || r.PerSecond <= 0 || r.PerSecond > maxRatePerSecond {
		return 0, 0, fmt.Errorf("%w: RateLimit.PerSecond must be more than 0 and at most %d", ErrInvalidEndpoint, maxRatePerSecond)
	}
	if r.Burst < 0 || r.Burst > maxRateBurst {
		return 0, 0, fmt.Errorf("%w: RateLimit.Burst must be 1 to %d (0: 1)", ErrInvalidEndpoint, maxRateBurst)
	}
	return r.PerSecond, int32(max(r.Burst, 1)), nil
}

// rateLimitFromRow returns the Endpoint.RateLimit of a stored limit.
func rateLimitFromRow(perSecond float64, burst int32) *RateLimit {
	if perSecond <= 0 {
		return nil
	}
	return &RateLimit{PerSecond: perSecond, Burst: int(burst)}
}
