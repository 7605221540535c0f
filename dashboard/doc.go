// Package dashboard serves Wharf's operator dashboard: an http.Handler an
// application mounts in its own mux, behind its own authentication, as it
// would riverui. `wharf serve` runs it standalone.
//
// The pages are server-rendered (html/template, embedded assets, charts as
// inline SVG, no JavaScript needed):
//
//	/                          overview: volume, duplicates and failures per hour per source,
//	                           deliveries by outcome per endpoint, dead-letter depth, lag
//	/inbox?status=&source=&type=&since=&q=   inbox messages (q: an event id)
//	/inbox/{id}                one message: headers (credentials and signatures redacted),
//	                           body, attempts, last error; replay or skip it
//	/outbox?status=&endpoint=&type=&since=&q=  deliveries (q: an event id)
//	/outbox/deliveries/{id}    one delivery, its event and its attempt log; replay it
//	/outbox/endpoints          endpoints and their health; enable, disable, rotate the
//	                           secret, replay dead deliveries
//	/partitions                partitions, sizes, expired and pending drops, oldest
//	                           unfinished row
//
// The query-string filters of /inbox and /outbox are a stable URL shape:
// links to them may be kept (in alerts, runbooks). since takes a duration
// ("24h", "7d") or a time (RFC 3339, or a date).
//
// Every state-changing action is a POST form, refused when it comes from
// another origin (http.CrossOriginProtection); Config.ReadOnly removes
// them. Secrets are never rendered: endpoint secrets are not read at all,
// a URL's password is masked, and credential and signature headers of
// stored messages are shown as [redacted].
package dashboard
