// Package inbox receives webhooks exactly once.
//
// Receiving a message is one transaction: the dedupe key (source, event id)
// is claimed, the raw message stored and its River job inserted; only then is
// the sender answered. A River worker later runs the application's Handler in
// a transaction that also marks the message processed and completes the job,
// so the handler's effect commits exactly once however often the sender
// retries, the worker crashes or duplicates arrive concurrently.
//
// Create an [Inbox] with [New] and a [Config] listing the [Source]s it
// accepts over HTTP (each with a signature.Verifier), register a [Handler]
// per source and event type with [Inbox.Handle] (or a [BatchHandler], which
// applies a batch's messages together, with [Inbox.HandleBatch]), and add
// the inbox's worker
// to the application's River client with [Inbox.AddWorkers]; that client
// must work [Inbox.Queue]. Messages arrive through [Inbox.Handler], the HTTP
// receiver (signature verification, body limits, event-id extraction and
// the JSON response contract), or through [Inbox.ReceiveTx] and
// [Inbox.ReceiveManyTx], which store [Incoming] messages from any other
// transport inside a transaction of the caller's own and return a [Result]
// saying whether each was a duplicate.
//
// A handler's error rolls its writes back and River retries; [Permanent]
// makes a message dead at once. Stored messages ([Message], with a [Status])
// are read with [Inbox.Get] and [Inbox.List], run again with [Inbox.Replay]
// and erased on request with [Inbox.Forget].
//
// The README's quick start shows a whole setup; docs/inbox.md covers how a
// delivery is answered, processing, writing a handler that is safe under
// concurrency, group commit and batched processing, ordering and the
// configuration.
package inbox
