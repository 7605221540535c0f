// Package chaos is Wharf's chaos suite; it has tests only.
//
// TestChaos runs the example app (example/, built once with go build) as
// three processes sharing one database through a TCP proxy, sends them a
// storm of signed, duplicated payment events, and meanwhile kills nodes
// with SIGKILL, restarts one and cuts every node's connection to Postgres.
// Afterwards every acknowledged event must have been applied exactly once
// and River's periodic jobs enqueued once per leadership term (or period),
// not once per node. It ends with one line:
//
//	CHAOS nodes=3 sent=… acknowledged=… processed=… doubled=0 lost=0 faults=kill:1,restart:1,cut:1 …
//
// TestChaosOutboxEndpoints sends outbox deliveries to endpoints that hang,
// reset the connection, answer byte by byte, redirect, or answer 200 and then
// trickle the body.
//
// The short form runs in make test (go test ./...). make chaos sets
// WHARF_CHAOS=long: a bigger storm, several kills and restarts, a second
// cut and a real Postgres restart of a private throwaway cluster (never the
// shared server other tests use). WHARF_CHAOS_SOAK=10m adds a soak at a
// fixed rate (half the measured maximum unless WHARF_CHAOS_SOAK_RATE says
// otherwise) with the periodic jobs running every minute and the nodes'
// clocks crossing midnight, sampling each node's RSS, threads and open
// files and reporting their growth.
package chaos
