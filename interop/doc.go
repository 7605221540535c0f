// Package interop holds Wharf's cross-checks against other libraries:
// stripe-go's webhook package and the Standard Webhooks reference library
// sign what Wharf verifies and verify what Wharf signs, and the outbox's
// deliveries verify with the reference library.
//
// It is a module of its own (github.com/wharfhq/wharf/interop) so that those
// libraries never reach the module graph of Wharf's importers; `make test`
// runs it beside the library's tests.
package interop
