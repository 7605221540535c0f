// Package ops holds what Wharf's operator tools, the wharf CLI and the
// dashboard, share so that they say the same thing the same way: how sizes
// and durations are written and read, how the duplicate ratio is defined,
// how an endpoint is named and when a delivery's next attempt may go. The
// library's packages do not import it.
package ops
