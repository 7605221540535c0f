// Command example is a small payments app built on Wharf: it receives
// Standard Webhooks–signed payment events at POST /webhooks/payments and
// keeps account balances, applying each event exactly once; it publishes a
// balance.updated webhook in the same transaction as each balance change;
// it takes payouts guarded by Idempotency-Keys; and Wharf's periodic jobs
// keep its tables pruned.
//
// Environment:
//
//	DATABASE_URL                 Postgres URL (required; `make demo` provides one); it may go
//	                             through PgBouncer in transaction mode (see docs/operations.md)
//	WHARF_EXAMPLE_MIGRATE_URL    direct Postgres URL for the migrations run at start, when
//	                             DATABASE_URL goes through a connection pooler (default DATABASE_URL)
//	WHARF_EXAMPLE_ADDR           listen address (default 127.0.0.1:8080)
//	WHARF_EXAMPLE_SECRET         Standard Webhooks secret of /webhooks/payments (default DevSecret)
//	WHARF_EXAMPLE_STRIPE_SECRET  Stripe signing secret of /webhooks/stripe (default DevStripeSecret)
//	WHARF_EXAMPLE_GITHUB_SECRET  GitHub webhook secret of /webhooks/github (default DevGitHubSecret)
//	WHARF_EXAMPLE_RETRY_SCHEDULE outbox retry schedule, comma-separated Go durations
//	                             (e.g. 0s,200ms,500ms; default Wharf's 0s,5s,5m,30m,2h,5h,10h,10h)
//	WHARF_EXAMPLE_ALLOW_PRIVATE  1 lets endpoints be loopback or private addresses
//	                             (default off: the SSRF guard refuses them)
//	WHARF_EXAMPLE_JOB_TIMEOUT    River's JobTimeout (default 20s)
//	WHARF_EXAMPLE_RESCUE_AFTER   River's RescueStuckJobsAfter (default 30s): how long
//	                             a killed node's jobs stay "running" before a retry;
//	                             at least WHARF_EXAMPLE_JOB_TIMEOUT
//	WHARF_EXAMPLE_JOBS_INTERVAL  period of Wharf's periodic jobs (default 1h, at least 1m)
//	WHARF_EXAMPLE_CLOCK_SKEW     added to the clock of Wharf's inbox, outbox and
//	                             periodic jobs (default 0; the chaos tests skew nodes)
//	WHARF_EXAMPLE_PORTAL_KEY     token key (base64 of 32 or more bytes: openssl rand -base64 32)
//	                             of the tenant portal and API at /portal/; when set, each
//	                             balance.updated is published with its account as the tenant,
//	                             so only that account's endpoints (none of POST /endpoints's)
//	                             receive it. Mint a link: WHARF_PORTAL_KEY=… wharf portal link
//	                             -tenant acct_1 -base http://127.0.0.1:8080/portal/
//
// The default secrets are public: use them only on a development machine.
//
// Routes:
//
//	POST /webhooks/payments   {"type":"payment.succeeded","data":{"account":"acct_1","amount":125}}
//	POST /webhooks/stripe     Stripe-signed events, deduped on the event's id, processed as no-ops
//	POST /webhooks/github     GitHub-signed events, deduped on X-GitHub-Delivery, processed as no-ops
//	GET  /balances/{account}  {"account":"acct_1","balance":125}
//	POST /payouts             {"account":"acct_1","amount":10} with an Idempotency-Key header
//	                          → 201 {"payout_id":"po_…","account":"acct_1","balance":115}
//	POST /endpoints           {"url":"https://…","event_types":["balance.updated"]}
//	                          → 201 {"id":"…","secret":"whsec_…"}
//	DELETE /endpoints/{id}    → 204
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/jobs"
	"github.com/wharfhq/wharf/portal"
)

// Development secrets, the defaults of the webhook routes. They are public.
const (
	DevSecret       = "whsec_ZGV2LXNlY3JldC1mb3Itd2hhcmYtZXhhbXBsZS1wYXltZW50cw=="
	DevStripeSecret = "whsec_dev_stripe_secret_for_the_wharf_example"
	DevGitHubSecret = "dev-github-secret-for-the-wharf-example"
)

type config struct {
	DatabaseURL   string
	MigrateURL    string // "": migrate through DatabaseURL
	Addr          string
	Secret        string
	StripeSecret  string
	GitHubSecret  string
	RetrySchedule []time.Duration // nil: the outbox's default
	AllowPrivate  bool
	JobTimeout    time.Duration // 0: riverConfig's
	RescueAfter   time.Duration // 0: riverConfig's
	JobsInterval  time.Duration // 0: the jobs package's default
	ClockSkew     time.Duration
	// PortalKey, when set, mounts the tenant portal and API at /portal/
	// and publishes each balance.updated with its account as the tenant.
	PortalKey []byte
}

func configFromEnv() (config, error) {
	cfg := config{
		DatabaseURL:  os.Getenv("DATABASE_URL"),
		MigrateURL:   os.Getenv("WHARF_EXAMPLE_MIGRATE_URL"),
		Addr:         envOr("WHARF_EXAMPLE_ADDR", "127.0.0.1:8080"),
		Secret:       envOr("WHARF_EXAMPLE_SECRET", DevSecret),
		StripeSecret: envOr("WHARF_EXAMPLE_STRIPE_SECRET", DevStripeSecret),
		GitHubSecret: envOr("WHARF_EXAMPLE_GITHUB_SECRET", DevGitHubSecret),
		AllowPrivate: os.Getenv("WHARF_EXAMPLE_ALLOW_PRIVATE") == "1",
	}
	if cfg.DatabaseURL == "" {
		return cfg, errors.New("DATABASE_URL is required (make demo starts a local Postgres and sets it)")
	}
	if v := os.Getenv("WHARF_EXAMPLE_PORTAL_KEY"); v != "" {
		key, err := portal.ParseKey(v)
		if err != nil {
			return cfg, fmt.Errorf("WHARF_EXAMPLE_PORTAL_KEY: %w (make one with: openssl rand -base64 32)", err)
		}
		cfg.PortalKey = key
	}
	if v := os.Getenv("WHARF_EXAMPLE_RETRY_SCHEDULE"); v != "" {
		for _, part := range strings.Split(v, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(part))
			if err != nil {
				return cfg, fmt.Errorf("WHARF_EXAMPLE_RETRY_SCHEDULE: %w", err)
			}
			cfg.RetrySchedule = append(cfg.RetrySchedule, d)
		}
	}
	for name, dst := range map[string]*time.Duration{
		"WHARF_EXAMPLE_JOB_TIMEOUT":   &cfg.JobTimeout,
		"WHARF_EXAMPLE_RESCUE_AFTER":  &cfg.RescueAfter,
		"WHARF_EXAMPLE_JOBS_INTERVAL": &cfg.JobsInterval,
		"WHARF_EXAMPLE_CLOCK_SKEW":    &cfg.ClockSkew,
	} {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return cfg, fmt.Errorf("%s: %w", name, err)
			}
			*dst = d
		}
	}
	return cfg, nil
}

// now is the clock of Wharf's inbox, outbox and periodic jobs.
func (c config) now() time.Time { return time.Now().Add(c.ClockSkew) }

// jobsConfig is the configuration of Wharf's periodic jobs.
func (c config) jobsConfig(logger *slog.Logger) *jobs.Config {
	return &jobs.Config{Logger: logger, Interval: c.JobsInterval, Now: c.now}
}

// tuneRiver applies the environment's overrides to rc.
func (c config) tuneRiver(rc *river.Config) *river.Config {
	rc.JobTimeout = cmp.Or(c.JobTimeout, rc.JobTimeout)
	rc.RescueStuckJobsAfter = cmp.Or(c.RescueAfter, rc.RescueStuckJobsAfter)
	return rc
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := mainErr(logger); err != nil {
		logger.Error("example: exiting", "error", err)
		os.Exit(1)
	}
}

func mainErr(logger *slog.Logger) error {
	cfg, err := configFromEnv()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	return run(ctx, cfg, ln, logger)
}
