// Package outbox publishes events inside the application's own Postgres
// transaction and delivers them as signed Standard Webhooks to subscribed
// endpoints, with retries, dead letters and endpoint health tracking.
//
// [Outbox.PublishTx] (or [Outbox.PublishManyTx]) writes the [Event] and one River
// job per matching endpoint in the caller's transaction (the deliveries to
// one endpoint published together share a job: [DeliveryBatchArgs]): if
// the transaction rolls back nothing is ever sent; once it commits,
// delivery attempts are guaranteed. Delivery is at least once: every attempt carries the same
// webhook-id (the event id), so a receiver dedupes on it.
//
// Create an [Outbox] with [New] and a [Config] (retry schedule, timeouts,
// the SSRF guard's [Config.AllowPrivateNetworks] and
// [Config.AllowedNetworks]). The application's River client works the jobs:
// register the delivery workers with [Outbox.AddWorkers] and list
// [Outbox.Queue] in the client's Queues. Receivers are [Endpoint]s, created
// with [Outbox.EndpointCreate], which returns the endpoint's signing secret
// once ([EndpointWithSecret]); every write has a …Tx twin taking the caller's
// pgx.Tx. Each event's progress to each endpoint is a [Delivery], listed with
// [Outbox.DeliveryList], its [Attempt]s with [Outbox.AttemptList]; a dead
// delivery is sent again with [Outbox.DeliveryReplay] or
// [Outbox.DeliveryReplayDead].
//
// docs/outbox.md shows a whole setup and covers endpoints, secrets at rest,
// rate limits and the circuit breaker, the configuration, delivery
// semantics, SSRF protection and replay.
package outbox
