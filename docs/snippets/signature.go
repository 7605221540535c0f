package snippets

import (
	"errors"
	"net/http"
	"os"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/signature"
)

// The README's signature presets ("Each preset in three lines"): each adds
// its source to cfg.

// standardWebhooksSource adds the Standard Webhooks source of the README.
func standardWebhooksSource(cfg *inbox.Config) {
	// readme:begin standard-webhooks
	secrets := signature.Secrets{os.Getenv("PAYMENTS_WEBHOOK_SECRET")} // "whsec_…" verifies v1; a "whpk_…" key verifies v1a
	verifier := signature.NewStandardWebhooks(secrets, nil)            // event id: header webhook-id
	source := inbox.Source{Name: "payments", Verifier: verifier}
	// readme:end
	cfg.Sources = append(cfg.Sources, source)
}

// svixSource adds the Svix (Clerk) source of the README.
func svixSource(cfg *inbox.Config) {
	// readme:begin svix
	secrets := signature.Secrets{os.Getenv("CLERK_WEBHOOK_SECRET")} // Svix endpoint secret, "whsec_…"
	verifier := signature.NewSvix(secrets, nil)                     // event id: header svix-id, else webhook-id
	source := inbox.Source{Name: "clerk", Verifier: verifier}
	// readme:end
	cfg.Sources = append(cfg.Sources, source)
}

// stripeSource adds the Stripe source of the README.
func stripeSource(cfg *inbox.Config) {
	// readme:begin stripe
	secrets := signature.Secrets{os.Getenv("STRIPE_WEBHOOK_SECRET")} // "whsec_…", used as it is (not base64-decoded)
	verifier := signature.NewStripe(secrets, nil)                    // event id: body "id"
	source := inbox.Source{Name: "stripe", Verifier: verifier}
	// readme:end
	cfg.Sources = append(cfg.Sources, source)
}

// gitHubSource adds the GitHub source of the README.
func gitHubSource(cfg *inbox.Config) {
	// readme:begin github
	secrets := signature.Secrets{os.Getenv("GITHUB_WEBHOOK_SECRET")} // the webhook's secret
	verifier := signature.NewGitHub(secrets, nil)                    // event id: header X-GitHub-Delivery
	source := inbox.Source{Name: "github", Verifier: verifier}
	// readme:end
	cfg.Sources = append(cfg.Sources, source)
}

// shopifySource adds the Shopify source of the README.
func shopifySource(cfg *inbox.Config) {
	// readme:begin shopify
	secrets := signature.Secrets{os.Getenv("SHOPIFY_CLIENT_SECRET")} // the app's client secret
	verifier := signature.NewShopify(secrets, nil)                   // event id: X-Shopify-Event-Id or shopify-event-id, else the webhook id
	source := inbox.Source{Name: "shopify", Verifier: verifier}
	// readme:end
	cfg.Sources = append(cfg.Sources, source)
}

// slackSource adds the Slack source of the README.
func slackSource(cfg *inbox.Config) {
	// readme:begin slack
	secrets := signature.Secrets{os.Getenv("SLACK_SIGNING_SECRET")} // the signing secret, not the verification token
	verifier := signature.NewSlack(secrets, nil)                    // event id: body "event_id"
	source := inbox.Source{Name: "slack", Verifier: verifier}
	// readme:end
	cfg.Sources = append(cfg.Sources, source)
}

// paddleSource adds the Paddle source of the README.
func paddleSource(cfg *inbox.Config) {
	// readme:begin paddle
	secrets := signature.Secrets{os.Getenv("PADDLE_WEBHOOK_SECRET")} // "pdl_ntfset_…"
	verifier := signature.NewPaddle(secrets, nil)                    // event id: body "event_id"
	source := inbox.Source{Name: "paddle", Verifier: verifier}
	// readme:end
	cfg.Sources = append(cfg.Sources, source)
}

// twilioSource adds the Twilio source of the README.
func twilioSource(cfg *inbox.Config) {
	// readme:begin twilio
	secrets := signature.Secrets{os.Getenv("TWILIO_AUTH_TOKEN"), os.Getenv("TWILIO_SECONDARY_AUTH_TOKEN")}
	verifier := signature.NewTwilio(secrets, &signature.Options{PublicBaseURL: "https://hooks.example.com"}) // event id: header I-Twilio-Idempotency-Token
	source := inbox.Source{Name: "twilio", Verifier: verifier}
	// readme:end
	cfg.Sources = append(cfg.Sources, source)
}

// squareSource adds the README's NewHMAC source (Square) to cfg.
func squareSource(cfg *inbox.Config) error {
	// readme:begin square
	square := signature.HMACConfig{SignatureHeader: "X-Square-Hmacsha256-Signature", Encoding: signature.Base64, Template: "{url}{body}", Events: signature.EventLocation{IDField: "event_id"}}
	verifier, err := signature.NewHMAC(signature.Secrets{os.Getenv("SQUARE_SIGNATURE_KEY")}, square, &signature.Options{PublicBaseURL: "https://hooks.example.com"})
	if err != nil {
		return err // it names what in the config is wrong
	}
	source := inbox.Source{Name: "square", Verifier: verifier}
	// readme:end
	cfg.Sources = append(cfg.Sources, source)
	return nil
}

// verifyOutsideTheInbox is the README's "Verifying outside the inbox".
func verifyOutsideTheInbox() {
	// readme:begin verify-http
	verifier := signature.NewStandardWebhooks(signature.Secrets{os.Getenv("WHARF_ENDPOINT_SECRET")}, nil)
	http.HandleFunc("POST /webhooks/wharf", func(w http.ResponseWriter, r *http.Request) {
		if _, err := signature.VerifyHTTP(r.Context(), verifier, r, 64<<10); err != nil {
			switch {
			case errors.Is(err, signature.ErrBodyTooLarge):
				http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			case errors.Is(err, signature.ErrUnreadableBody):
				http.Error(w, err.Error(), http.StatusBadRequest)
			case signature.ReceiverFault(err): // our secret store or config, not the sender
				http.Error(w, "retry later", http.StatusServiceUnavailable)
			default: // the package's errors carry no secret or signature
				http.Error(w, err.Error(), http.StatusUnauthorized)
			}
			return
		}
		// r.Body reads the verified body again; webhook-id is the event id.
	})
	// readme:end
}
