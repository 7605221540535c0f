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

// Shopify's Events deliveries name their headers without the X- prefix, in
// lower case; for now they also carry the X-Shopify-* ones.
const (
	// HeaderShopifyEventsHmac is HeaderShopifyHmac's unprefixed name.
	HeaderShopifyEventsHmac = "shopify-hmac-sha256"
	// HeaderShopifyEventsEventID is HeaderShopifyEventID's unprefixed name.
	HeaderShopifyEventsEventID = "shopify-event-id"
	// HeaderShopifyEventsWebhookID is HeaderShopifyWebhookID's unprefixed
	// name, the id Shopify's Events documentation dedupes deliveries on.
	HeaderShopifyEventsWebhookID = "shopify-webhook-id"
	// HeaderShopifyEventsTopic is HeaderShopifyTopic's unprefixed name.
	HeaderShopifyEventsTopic = "shopify-topic"
)

var shopifyConfig = HMACConfig{
	SignatureHeader:     HeaderShopifyHmac,
	AltSignatureHeaders: []string{HeaderShopifyEventsHmac},
	Algorithm:           SHA256,
	Encoding:            Base64,
	Events: EventLocation{
		IDHeader:        HeaderShopifyEventID,
		AltIDHeader:     HeaderShopifyEventsEventID,
		MoreIDHeaders:   []string{HeaderShopifyWebhookID, HeaderShopifyEventsWebhookID},
		TypeHeader:      HeaderShopifyTopic,
		MoreTypeHeaders: []string{HeaderShopifyEventsTopic},
	},
}

// NewShopify returns a verifier for Shopify webhooks: X-Shopify-Hmac-Sha256,
// or shopify-hmac-sha256 as Shopify's Events deliveries name it, is the
// base64 HMAC-SHA256 of the body, keyed by the app's client secret. A
// request may carry both names, as Events deliveries do, when they hold the
// same value; different values are refused with ErrMalformedHeader (one of
// them is not Shopify's, and which is not for the verifier to guess).
// Shopify signs no timestamp, so opts (nil for the defaults) has nothing to
// tune.
//
// The event id is the event's (X-Shopify-Event-Id, else shopify-event-id),
// else the webhook's (X-Shopify-Webhook-Id, else shopify-webhook-id); the
// type is X-Shopify-Topic, else shopify-topic. Shopify signs none of them:
// see EventLocation.SignedHeaders.
func NewShopify(secrets SecretSource, opts *Options) *HMAC {
	return mustHMAC(secrets, shopifyConfig, opts)
}
