// Package outboxtype holds the leaf types the outbox's engines share, so
// that none of them imports another to reach one: the attempt value
// (Delivery: a delivery as a worker loaded it, which the gate, admission,
// egress and the record read), an endpoint's stored authentication (Auth,
// which the outbox checks, secretbox seals and egress sends), the stored
// forms of statuses, circuit states, event ids and headers. It imports
// nothing of Wharf's.
package outboxtype
