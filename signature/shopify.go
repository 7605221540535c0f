package signature

// Shopify webhook headers.
const (
	// HeaderShopifyHmac carries the base64 HMAC-SHA256 of the body.
	HeaderShopifyHmac = "X-Shopify-Hmac-Sha256"
	// HeaderShopifyEventID carries the id of the event, shared by every
	// webhook the event triggers.
	HeaderShopifyEventID = "X-Shopify-Event-Id"
	// HeaderShopifyWebhookID carries the id of the webhook, kept across its
	// retries; older deliveries carry only this one.
	HeaderShopifyWebhookID = "X-Shopify-Webhook-Id"
	// HeaderShopifyTopic carries the topic (orders/create…).
	HeaderShopifyTopic = "X-Shopify-Topic"
)

var shopifyConfig = HMACConfig{
	SignatureHeader: HeaderShopifyHmac,
	Algorithm:       SHA256,
	Encoding:        Base64,
	Events: EventLocation{
		IDHeader:    HeaderShopifyEventID,
		AltIDHeader: HeaderShopifyWebhookID,
		TypeHeader:  HeaderShopifyTopic,
	},
}

// NewShopify returns a verifier for Shopify webhooks: X-Shopify-Hmac-Sha256
// is the base64 HMAC-SHA256 of the body, keyed by the app's client secret.
// Shopify signs no timestamp, so opts (nil for the defaults) has nothing to
// tune. The event id is X-Shopify-Event-Id, else X-Shopify-Webhook-Id
// (EventLocation.AltIDHeader), and the type X-Shopify-Topic.
func NewShopify(secrets SecretSource, opts *Options) *HMAC {
	return mustHMAC(secrets, shopifyConfig, opts)
}
