package outbox

import (
	"github.com/wharfhq/wharf/internal/outboxtype"
)

// CircuitState is where an endpoint's circuit breaker stands.
//
// After Config.CircuitBreakerThreshold consecutive failed attempts the
// circuit opens: the endpoint's deliveries wait (snoozed, without using an
// attempt) for a cool-down. Then one delivery, across every process,
// probes the endpoint (half-open): its success closes the circuit and the
// others follow; its failure opens it again for a cool-down twice as long,
// up to Config.CircuitBreakerMaxCooldown.
type CircuitState string

// Circuit states.
const (
	// CircuitClosed: deliveries go as usual.
	CircuitClosed CircuitState = outboxtype.CircuitClosed
	// CircuitOpen: deliveries wait until Endpoint.CircuitOpenUntil.
	CircuitOpen CircuitState = outboxtype.CircuitOpen
	// CircuitHalfOpen: the cool-down is over and one delivery probes the
	// endpoint; the others wait for its outcome.
	CircuitHalfOpen CircuitState = outboxtype.CircuitHalfOpen
)
