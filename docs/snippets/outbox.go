package snippets

import (
	"context"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/wharfriver"
)

// outboxQuickStart is the README's outbox quick start.
func outboxQuickStart(ctx context.Context, pool *pgxpool.Pool, account string, balance int64) error {
	// readme:begin outbox-quick-start
	ob, err := outbox.New(pool, &outbox.Config{}) // nil also means every default
	if err != nil {
		return err
	}

	// Attach its delivery worker and queue to your River client (with the
	// inbox too, when you have one: one Configure call takes every component).
	riverCfg := &river.Config{} // Configure gives the outbox queue a 5 ms FetchCooldown
	if err := wharfriver.Configure(riverCfg, &wharfriver.Components{Pool: pool, Outbox: ob}); err != nil {
		return err
	}
	client, err := river.NewClient(riverpgxv5.New(pool), riverCfg)
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}

	// Create an endpoint: the answer carries its whsec_ secret for the receiver.
	ep, err := ob.EndpointCreate(ctx, &outbox.EndpointParams{
		URL:        "https://example.com/webhooks",
		EventTypes: []string{"balance.updated", "invoice.*"},
	})
	if err != nil {
		return err
	}
	// ep.Secret is "whsec_…" (32 random bytes): give it to the receiver, never to a log.
	log.Printf("endpoint %s created", ep.ID)

	// Publish in the same transaction as the change it announces.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = $1 WHERE id = $2`, balance, account); err != nil {
			return err
		}
		_, err := ob.PublishTx(ctx, tx, &outbox.Event{
			Type: "balance.updated",
			Data: map[string]any{"account": account, "balance": balance},
		})
		return err
	})
	if err != nil {
		return err
	}
	// readme:end
	return nil
}

// endpointEnsure is the README's startup registration of an endpoint.
func endpointEnsure(ctx context.Context, ob *outbox.Outbox) error {
	// readme:begin endpoint-ensure
	res, err := ob.EndpointEnsure(ctx, &outbox.EndpointParams{
		URL:        "https://hooks.partner.example/wharf",
		EventTypes: []string{"order.*"},
	})
	if err != nil {
		return err
	}
	if res.Created {
		log.Printf("endpoint %s created; give its receiver the secret", res.ID)
	}
	// readme:end
	return nil
}

// endpointAuth is the README's endpoint with custom headers and OAuth 2.0
// client credentials.
func endpointAuth(ctx context.Context, ob *outbox.Outbox) error {
	// readme:begin endpoint-auth
	_, err := ob.EndpointEnsure(ctx, &outbox.EndpointParams{
		URL:     "https://api.partner.example/webhooks",
		Headers: http.Header{"X-Partner-Account": {"acct_42"}},
		Auth: &outbox.EndpointAuth{OAuth2: &outbox.OAuth2ClientCredentials{
			TokenURL:     "https://auth.partner.example/oauth/token",
			ClientID:     os.Getenv("PARTNER_CLIENT_ID"),
			ClientSecret: os.Getenv("PARTNER_CLIENT_SECRET"),
			Scopes:       []string{"webhooks:write"},
		}},
	})
	// readme:end
	return err
}

// endpointLimits is the README's rate-limited endpoint and circuit
// breaker settings.
func endpointLimits(ctx context.Context, pool *pgxpool.Pool) error {
	// readme:begin endpoint-limits
	ob, err := outbox.New(pool, &outbox.Config{
		CircuitBreakerThreshold:   20,          // consecutive failed attempts; -1 disables the breaker
		CircuitBreakerCooldown:    time.Minute, // doubled after each failed probe…
		CircuitBreakerMaxCooldown: 30 * time.Minute,
	})
	if err != nil {
		return err
	}
	_, err = ob.EndpointEnsure(ctx, &outbox.EndpointParams{
		URL:         "https://api.partner.example/webhooks",
		MaxInFlight: 5,                                           // requests in flight at once
		RateLimit:   &outbox.RateLimit{PerSecond: 10, Burst: 20}, // across every worker process
	})
	// readme:end
	return err
}

// outboxRescueWiring is docs/outbox-recovery.md's wiring without
// wharfriver.Configure.
func outboxRescueWiring(cfg *river.Config, ob *outbox.Outbox) {
	// readme:begin outbox-rescue-wiring
	cfg.PeriodicJobs = append(cfg.PeriodicJobs, ob.PeriodicJobs()...)
	// readme:end
}
