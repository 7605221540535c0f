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
// wharfmigrate, which an application may import instead. The README's
// "Operations" section ("Migrations") says how to run them and repair a
// dirty schema.
//
// The rest lives in one package per concern:
//
//   - inbox receives webhooks: it verifies, dedupes and stores each one in a
//     single transaction, then runs the application's handler exactly once
//     in a River worker (README, "Quick start: the inbox").
//   - signature verifies Standard Webhooks, Svix, Stripe, GitHub, Shopify,
//     Slack, Paddle, Twilio and generic HMAC signatures, and signs Standard
//     Webhooks; it uses the standard library only (README, "Signature
//     schemes").
//   - outbox publishes events in the application's transaction and delivers
//     them as signed Standard Webhooks, with retries, dead letters, replay,
//     endpoint health and an SSRF guard (README, "Outbox: send webhooks
//     reliably").
//   - idempotency is Idempotency-Key middleware for the application's own
//     endpoints, its keys committed with the handler's work (README,
//     "Idempotency keys for your own endpoints").
//   - wharfriver attaches all of them to an application's river.Config in
//     one call (README, "River configuration").
//   - jobs holds the River periodic jobs that keep partitions ahead and drop
//     or prune what has expired, never unfinished work (README, "Retention:
//     partitions and pruning").
//
// The wharf command (cmd/wharf) is the operator's CLI: migrations, inbox
// inspection, replay and erasure, partitions, prune, and send, which signs
// and POSTs a test webhook (README, "Operations", "CLI").
package wharf
