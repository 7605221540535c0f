package signature

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks header names (https://www.standardwebhooks.com).
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// StandardWebhooksSecretPrefix starts every Standard Webhooks symmetric
// secret; the rest is the base64 of the key.
const StandardWebhooksSecretPrefix = "whsec_"

// swHeaders names the three headers of a Standard Webhooks–shaped scheme, so
// Svix (the same scheme under svix-* names) reuses the implementation.
type swHeaders struct{ id, timestamp, signature string }

var standardHeaders = swHeaders{HeaderWebhookID, HeaderWebhookTimestamp, HeaderWebhookSignature}

// StandardWebhooks verifies Standard Webhooks v1 signatures: HMAC-SHA256 of
// "id.timestamp.body" keyed by the base64-decoded whsec_ secret, sent as a
// space-separated list of "v1,<base64>" entries.
type StandardWebhooks struct {
	secrets SecretSource
	opts    *Options
	headers swHeaders
}

// NewStandardWebhooks returns a verifier for Standard Webhooks v1 with the
// given secrets ("whsec_…"; the prefix is optional) and options (nil for the
// defaults).
func NewStandardWebhooks(secrets SecretSource, opts *Options) *StandardWebhooks {
	return &StandardWebhooks{secrets: secrets, opts: opts, headers: standardHeaders}
}

// EventLocation reports that the event id is the webhook-id header and the
// type the body's "type" field, as the specification recommends.
func (s *StandardWebhooks) EventLocation() EventLocation {
	return EventLocation{IDHeader: s.headers.id, TypeField: "type"}
}

// Verify checks r's signature. See the package documentation for errors.
func (s *StandardWebhooks) Verify(ctx context.Context, r *Request) error {
	id, err := header(r.Header, s.headers.id)
	if err != nil {
		return err
	}
	tsRaw, err := header(r.Header, s.headers.timestamp)
	if err != nil {
		return err
	}
	sigHeader, err := header(r.Header, s.headers.signature)
	if err != nil {
		return err
	}
	ts, err := parseUnix(tsRaw)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrMalformedHeader, s.headers.timestamp, err)
	}
	candidates, err := parseStandardSignatures(sigHeader)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrMalformedHeader, s.headers.signature, err)
	}
	if err := s.opts.checkTimestamp(ts); err != nil {
		return err
	}
	keys, err := standardKeys(ctx, s.secrets)
	if err != nil {
		return err
	}
	for _, key := range keys {
		expected := standardMAC(key, id, tsRaw, r.Body)
		for _, candidate := range candidates {
			if hmac.Equal(expected, candidate) {
				return nil
			}
		}
	}
	return ErrNoMatch
}

// SignStandardWebhooks returns the Standard Webhooks headers for body, with
// one v1 signature per secret (several during a rotation). ts is sent as unix
// seconds.
func SignStandardWebhooks(secrets []string, id string, ts time.Time, body []byte) (http.Header, error) {
	keys, err := standardKeys(context.Background(), Secrets(secrets))
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, fmt.Errorf("signature: empty message id")
	}
	tsRaw := strconv.FormatInt(ts.Unix(), 10)
	sigs := make([]string, len(keys))
	for i, key := range keys {
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(standardMAC(key, id, tsRaw, body))
	}
	h := http.Header{}
	h.Set(HeaderWebhookID, id)
	h.Set(HeaderWebhookTimestamp, tsRaw)
	h.Set(HeaderWebhookSignature, strings.Join(sigs, " "))
	return h, nil
}

func standardMAC(key []byte, id, ts string, body []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return mac.Sum(nil)
}

// DecodeStandardSecret returns the HMAC key of a "whsec_<base64>" secret
// (the prefix is optional).
func DecodeStandardSecret(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, StandardWebhooksSecretPrefix))
	if err != nil || len(key) == 0 {
		// The secret itself stays out of the message.
		return nil, fmt.Errorf("%w: secret is not %s followed by base64", ErrNoSecrets, StandardWebhooksSecretPrefix)
	}
	return key, nil
}

func standardKeys(ctx context.Context, src SecretSource) ([][]byte, error) {
	all, err := secrets(ctx, src)
	if err != nil {
		return nil, err
	}
	keys := make([][]byte, 0, len(all))
	for _, s := range all {
		key, err := DecodeStandardSecret(s)
		if err != nil {
			return nil, err
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// parseStandardSignatures returns the decoded v1 signatures of a
// space-separated "version,base64" list. Other versions are skipped, as the
// specification asks; an entry without a comma or with bad base64 makes the
// header malformed.
func parseStandardSignatures(v string) ([][]byte, error) {
	var out [][]byte
	entries := 0
	for entry := range strings.FieldsSeq(v) {
		entries++
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version == "" {
			return nil, fmt.Errorf("entry %d is not version,signature", entries)
		}
		if version != "v1" {
			continue
		}
		decoded, err := base64.StdEncoding.DecodeString(sig)
		if err != nil || len(decoded) == 0 {
			return nil, fmt.Errorf("entry %d is not base64", entries)
		}
		out = append(out, decoded)
	}
	if entries == 0 {
		return nil, fmt.Errorf("no entries")
	}
	return out, nil
}

// parseUnix parses integer unix seconds.
func parseUnix(v string) (time.Time, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("not integer unix seconds")
	}
	return time.Unix(n, 0), nil
}
