// Package outboxtype holds the leaf types the outbox's engines share, so
// that none of them imports another to reach one: an endpoint's stored
// authentication (Auth), which the outbox checks, secretbox seals and
// egress sends. It imports nothing of Wharf's.
package outboxtype
