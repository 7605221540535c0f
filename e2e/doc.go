// Package e2e holds Wharf's browser tests: they drive Debian's chromium
// (headless, through chromedp) over the dashboard and a seeded database.
// It is a module of its own so that the browser driver stays out of the
// library's go.mod. `make test` runs it; chromium missing is a failure
// with how to install it, never a skip. `make screenshot` refreshes
// docs/dashboard.png from the same test.
package e2e
