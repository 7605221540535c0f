// Command example is a small payments app built on Wharf: it receives
// Standard Webhooks–signed payment events at POST /webhooks/payments and
// keeps account balances, applying each event exactly once.
//
// Environment:
//
//	DATABASE_URL          Postgres URL (required; `make demo` provides one)
//	WHARF_EXAMPLE_ADDR    listen address (default 127.0.0.1:8080)
//	WHARF_EXAMPLE_SECRET  Standard Webhooks secret for /webhooks/payments
//	                      (default DevSecret, for local use only)
//
// Routes:
//
//	POST /webhooks/payments   {"type":"payment.succeeded","data":{"account":"acct_1","amount":125}}
//	GET  /balances/{account}  {"account":"acct_1","balance":125}
//	POST /payouts             {"account":"acct_1","amount":10} with an Idempotency-Key header
//	                          → 201 {"payout_id":"po_…","account":"acct_1","balance":115}
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
)

// DevSecret is the default signing secret of /webhooks/payments. It is
// public: use it only on a development machine.
const DevSecret = "whsec_ZGV2LXNlY3JldC1mb3Itd2hhcmYtZXhhbXBsZS1wYXltZW50cw=="

type config struct {
	DatabaseURL string
	Addr        string
	Secret      string
}

func configFromEnv() (config, error) {
	cfg := config{
		DatabaseURL: os.Getenv("DATABASE_URL"),
		Addr:        envOr("WHARF_EXAMPLE_ADDR", "127.0.0.1:8080"),
		Secret:      envOr("WHARF_EXAMPLE_SECRET", DevSecret),
	}
	if cfg.DatabaseURL == "" {
		return cfg, errors.New("DATABASE_URL is required (make demo starts a local Postgres and sets it)")
	}
	return cfg, nil
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
