// Package wharf gives Postgres applications a transactional webhook inbox
// and outbox, built on pgx v5 and River. The dedupe key, the stored message
// and the River job commit in the same transaction as the application's own
// work: a received webhook's effect happens exactly once, and an event
// published in a transaction that rolls back is never sent.
//
// This package holds what every part shares, the schema: [Migrate] brings
// River's tables (through rivermigrate) and Wharf's own (through
// golang-migrate, from the embedded schema, versioned in [MigrationsTable])
// to the latest version and creates the daily partitions up to
// [PartitionDaysAhead] days ahead. [Status] reports both versions,
// [MigrateDown] and [MigrateRiverDown] revert them, and [ErrDirty] reports a
// Wharf migration that failed half-way. They forward to package
// wharfmigrate, which an application may import instead. docs/operations.md
// ("Migrations") says how to run them and repair a dirty schema.
//
// The rest lives in one package per concern:
//
//   - inbox receives webhooks: it verifies, dedupes and stores each one in a
//     single transaction, then runs the application's handler exactly once
//     in a River worker (docs/inbox.md; the README's quick start).
//   - signature verifies Standard Webhooks, Svix, Stripe, GitHub, Shopify,
//     Slack, Paddle, Twilio and generic HMAC signatures, and signs Standard
//     Webhooks; it uses the standard library only (docs/signatures.md).
//   - outbox publishes events in the application's transaction and delivers
//     them as signed Standard Webhooks, with retries, dead letters, replay,
//     endpoint health and an SSRF guard (docs/outbox.md).
//   - idempotency is Idempotency-Key middleware for the application's own
//     endpoints, its keys committed with the handler's work
//     (docs/idempotency.md).
//   - wharfriver attaches all of them to an application's river.Config in
//     one call (docs/operations.md, "River configuration").
//   - jobs holds the River periodic jobs that keep partitions ahead and drop
//     or prune what has expired, never unfinished work (docs/retention.md).
//
// The wharf command (cmd/wharf) is the operator's CLI: migrations, inbox
// inspection, replay and erasure, partitions, prune, and send, which signs
// and POSTs a test webhook (docs/operations.md, "CLI").
//
// docs/design.md gives the architecture, the invariants every part keeps
// and the alternatives turned down.
package wharf
