package signature

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks header names (https://www.standardwebhooks.com).
const (
	// HeaderWebhookID carries the message id, the same on every attempt.
	HeaderWebhookID = "webhook-id"
	// HeaderWebhookTimestamp carries the attempt's signing time in unix
	// seconds.
	HeaderWebhookTimestamp = "webhook-timestamp"
	// HeaderWebhookSignature carries space-separated "v1,<base64>" and
	// "v1a,<base64>" signatures.
	HeaderWebhookSignature = "webhook-signature"
)

// Svix sends the Standard Webhooks scheme under these names, or, for an
// application with whitelabelled headers, under the webhook-* names.
const (
	// HeaderSvixID is Svix's webhook-id.
	HeaderSvixID = "svix-id"
	// HeaderSvixTimestamp is Svix's webhook-timestamp.
	HeaderSvixTimestamp = "svix-timestamp"
	// HeaderSvixSignature is Svix's webhook-signature.
	HeaderSvixSignature = "svix-signature"
)

// Prefixes of Standard Webhooks keys; the rest of each is base64.
const (
	// StandardWebhooksSecretPrefix starts a symmetric secret: the HMAC key
	// of v1 signatures.
	StandardWebhooksSecretPrefix = "whsec_"
	// StandardWebhooksPublicKeyPrefix starts an ed25519 public key, which
	// verifies v1a signatures.
	StandardWebhooksPublicKeyPrefix = "whpk_"
	// StandardWebhooksSecretKeyPrefix starts an ed25519 private key (the
	// 32-byte seed, or the 64-byte seed and public key), which signs v1a.
	StandardWebhooksSecretKeyPrefix = "whsk_"
)

// swHeaders names the three headers of a Standard Webhooks–shaped scheme, so
// Svix (the same scheme under svix-* names) reuses the implementation.
type swHeaders struct{ id, timestamp, signature string }

// carriedBy reports whether h carries this set's id header, even empty.
func (s swHeaders) carriedBy(h http.Header) bool { return len(h.Values(s.id)) > 0 }

var (
	standardHeaders = swHeaders{HeaderWebhookID, HeaderWebhookTimestamp, HeaderWebhookSignature}
	svixHeaders     = swHeaders{HeaderSvixID, HeaderSvixTimestamp, HeaderSvixSignature}
)

// StandardWebhooks verifies Standard Webhooks signatures over
// "id.timestamp.body", sent as a space-separated list of "version,base64"
// entries: v1 is HMAC-SHA256 keyed by a whsec_ secret's decoded bytes, v1a
// is ed25519 checked with a whpk_ public key. Unknown versions are skipped.
type StandardWebhooks struct {
	secrets SecretSource
	opts    *Options
	// headerSets are the header sets accepted, in order of precedence: a
	// request is verified with the first whose id header it carries.
	headerSets []swHeaders
	work       *workCounter
}

// NewStandardWebhooks returns a Standard Webhooks verifier with the given
// keys and options (nil for the defaults). Each key is told apart by its
// prefix: "whsec_…" (or bare base64) verifies v1, "whpk_…" verifies v1a, and
// "whsk_…" verifies v1a with the public key derived from it; one source may
// mix them, as the specification allows a sender to switch.
//
// It reads the webhook-* headers only, as the specification's reference
// libraries do: a request signed under svix-* names is Svix's, for NewSvix.
func NewStandardWebhooks(secrets SecretSource, opts *Options) *StandardWebhooks {
	return &StandardWebhooks{secrets: secrets, opts: opts, headerSets: []swHeaders{standardHeaders}}
}

// NewSvix returns a verifier for Svix, which sends Standard Webhooks under
// svix-id, svix-timestamp and svix-signature, or under webhook-id,
// webhook-timestamp and webhook-signature for an application with
// whitelabelled headers; secrets are Svix's whsec_ endpoint secrets.
//
// A request carrying svix-id is verified with the svix-* headers alone,
// otherwise with the webhook-* headers alone: one set's id is never checked
// against the other's signature. Svix's own libraries fall back to the
// webhook-* set whenever one svix-* header is missing; this verifier refuses
// a request carrying svix-id without the rest of its set (ErrMissingHeader)
// instead, so that the event id read first, svix-id, is always one the
// signature covers.
func NewSvix(secrets SecretSource, opts *Options) *StandardWebhooks {
	return &StandardWebhooks{secrets: secrets, opts: opts, headerSets: []swHeaders{svixHeaders, standardHeaders}}
}

// EventLocation reports that the event id is the id header (webhook-id, or
// for Svix svix-id, else webhook-id), which the signature covers with the
// timestamp header of its set, and the type the body's "type" field, as the
// specification recommends. A request is verified with the set of the first
// id header it carries, so that id is signed.
func (s *StandardWebhooks) EventLocation() EventLocation {
	loc := EventLocation{TypeField: "type"}
	for i, set := range s.headerSets {
		if i == 0 {
			loc.IDHeader = set.id
		} else {
			loc.AltIDHeader = set.id
		}
		loc.SignedHeaders = append(loc.SignedHeaders, set.id, set.timestamp)
	}
	return loc
}

// headersFor returns the header set r is verified with: the first whose id
// header r carries, else, when it carries none, an error naming them all.
func (s *StandardWebhooks) headersFor(r *Request) (swHeaders, error) {
	names := make([]string, len(s.headerSets))
	for i, set := range s.headerSets {
		if set.carriedBy(r.Header) {
			return set, nil
		}
		names[i] = set.id
	}
	return swHeaders{}, fmt.Errorf("%w: %s", ErrMissingHeader, strings.Join(names, " or "))
}

// Verify checks r's signature. See the package documentation for errors.
func (s *StandardWebhooks) Verify(ctx context.Context, r *Request) error {
	headers, err := s.headersFor(r)
	if err != nil {
		return err
	}
	id, err := header(r.Header, headers.id)
	if err != nil {
		return err
	}
	if strings.TrimSpace(id) == "" {
		// Blank is absent to a reader of the id, such as the inbox, which
		// would then read the next set's unsigned id.
		return fmt.Errorf("%w: %s is blank", ErrMissingHeader, headers.id)
	}
	tsRaw, err := header(r.Header, headers.timestamp)
	if err != nil {
		return err
	}
	sigHeader, err := signatureHeader(r.Header, headers.signature)
	if err != nil {
		return err
	}
	ts, err := parseUnix(tsRaw)
	if err != nil {
		return malformed(headers.timestamp, "timestamp is "+err.Error())
	}
	sigs, err := parseStandardSignatures(sigHeader)
	if err != nil {
		return malformed(headers.signature, err.Error())
	}
	if err := s.opts.checkTimestamp(ts); err != nil {
		return err
	}
	keys, err := standardKeys(ctx, s.secrets)
	if err != nil {
		return err
	}
	content := standardContent(id, tsRaw, r.Body)
	if len(keys.hmac) > 0 && len(sigs.v1) > 0 {
		if err := matchMAC(s.work, sha256.New, keys.hmac, sigs.v1, content); err == nil {
			return nil
		}
	}
	if len(keys.public) > 0 && len(sigs.v1a) > 0 {
		msg := bytes.Join(content, nil)
		for _, pub := range keys.public {
			for _, sig := range sigs.v1a {
				s.work.add()
				if ed25519.Verify(pub, msg, sig) {
					return nil
				}
			}
		}
	}
	return ErrNoMatch
}

// SignStandardWebhooks returns the Standard Webhooks headers for body, with
// one signature per secret (several during a rotation), in the order given:
// a "whsec_…" secret signs v1 (HMAC-SHA256), a "whsk_…" key signs v1a
// (ed25519). ts is sent as unix seconds.
func SignStandardWebhooks(secrets []string, id string, ts time.Time, body []byte) (http.Header, error) {
	all, err := secretsOf(context.Background(), Secrets(secrets))
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, errors.New("signature: empty message id")
	}
	tsRaw := strconv.FormatInt(ts.Unix(), 10)
	content := standardContent(id, tsRaw, body)
	sigs := make([]string, len(all))
	for i, secret := range all {
		key, err := decodeStandardKey(secret)
		if err != nil {
			return nil, err
		}
		switch {
		case key.private != nil:
			sigs[i] = "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(key.private, bytes.Join(content, nil)))
		case key.hmac != nil:
			sigs[i] = "v1," + base64.StdEncoding.EncodeToString(computeMAC(sha256.New, key.hmac, content...))
		default:
			return nil, fmt.Errorf("%w: a %s public key cannot sign", ErrNoSecrets, StandardWebhooksPublicKeyPrefix)
		}
	}
	h := http.Header{}
	h.Set(HeaderWebhookID, id)
	h.Set(HeaderWebhookTimestamp, tsRaw)
	h.Set(HeaderWebhookSignature, strings.Join(sigs, " "))
	return h, nil
}

// standardContent is the signed content "id.timestamp.body".
func standardContent(id, ts string, body []byte) [][]byte {
	return [][]byte{[]byte(id), {'.'}, []byte(ts), {'.'}, body}
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

// decodeStandardPublicKey returns the ed25519 key of "whpk_<base64>".
func decodeStandardPublicKey(key string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(key, StandardWebhooksPublicKeyPrefix))
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: key is not %s followed by the base64 of a %d-byte ed25519 public key",
			ErrNoSecrets, StandardWebhooksPublicKeyPrefix, ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// decodeStandardPrivateKey returns the ed25519 key of "whsk_<base64>",
// whose bytes are the 32-byte seed or the 64-byte seed and public key.
func decodeStandardPrivateKey(key string) (ed25519.PrivateKey, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(key, StandardWebhooksSecretKeyPrefix))
	bad := fmt.Errorf("%w: key is not %s followed by the base64 of an ed25519 seed (%d bytes) or private key (%d bytes)",
		ErrNoSecrets, StandardWebhooksSecretKeyPrefix, ed25519.SeedSize, ed25519.PrivateKeySize)
	if err != nil {
		return nil, bad
	}
	switch len(b) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(b), nil
	case ed25519.PrivateKeySize:
		private := ed25519.NewKeyFromSeed(b[:ed25519.SeedSize])
		if !bytes.Equal(private[ed25519.SeedSize:], b[ed25519.SeedSize:]) {
			return nil, fmt.Errorf("%w: %s key's public half does not match its seed", ErrNoSecrets, StandardWebhooksSecretKeyPrefix)
		}
		return private, nil
	}
	return nil, bad
}

// GenerateStandardSecret returns a new random "whsec_" secret of 32 bytes.
func GenerateStandardSecret() (string, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("signature: generate secret: %w", err)
	}
	return StandardWebhooksSecretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// GenerateStandardKeyPair returns a new ed25519 key pair for v1a: the
// "whsk_" private key (its 32-byte seed), which signs, and the "whpk_"
// public key, which receivers verify with.
func GenerateStandardKeyPair() (privateKey, publicKey string, err error) {
	public, private, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("signature: generate key pair: %w", err)
	}
	return StandardWebhooksSecretKeyPrefix + base64.StdEncoding.EncodeToString(private.Seed()),
		StandardWebhooksPublicKeyPrefix + base64.StdEncoding.EncodeToString(public), nil
}

// standardKey is one decoded Standard Webhooks key: an HMAC key (whsec_),
// a public key (whpk_), or a private key and its public half (whsk_).
type standardKey struct {
	hmac    []byte
	public  ed25519.PublicKey
	private ed25519.PrivateKey
}

// decodeStandardKey tells a key's kind by its prefix; anything without a
// whpk_ or whsk_ prefix is a whsec_ secret.
func decodeStandardKey(s string) (standardKey, error) {
	var (
		key standardKey
		err error
	)
	switch {
	case strings.HasPrefix(s, StandardWebhooksPublicKeyPrefix):
		key.public, err = decodeStandardPublicKey(s)
	case strings.HasPrefix(s, StandardWebhooksSecretKeyPrefix):
		if key.private, err = decodeStandardPrivateKey(s); err == nil {
			key.public = key.private.Public().(ed25519.PublicKey)
		}
	default:
		key.hmac, err = DecodeStandardSecret(s)
	}
	return key, err
}

// standardKeyring holds a source's keys sorted by the version they verify.
type standardKeyring struct {
	hmac   [][]byte
	public []ed25519.PublicKey
}

func standardKeys(ctx context.Context, src SecretSource) (standardKeyring, error) {
	var ring standardKeyring
	all, err := secretsOf(ctx, src)
	if err != nil {
		return ring, err
	}
	for _, s := range all {
		key, err := decodeStandardKey(s)
		if err != nil {
			return ring, err
		}
		if key.hmac != nil {
			ring.hmac = append(ring.hmac, key.hmac)
		} else {
			ring.public = append(ring.public, key.public)
		}
	}
	return ring, nil
}

// standardSignatures are the decoded signatures of a webhook-signature
// header, by version.
type standardSignatures struct{ v1, v1a [][]byte }

// parseStandardSignatures reads a space-separated "version,base64" list.
// Unknown versions are skipped, as the specification asks; an entry without
// a comma, a known version with bad base64, or more than MaxSignatureEntries
// entries make the header malformed.
func parseStandardSignatures(v string) (standardSignatures, error) {
	var sigs standardSignatures
	entries := 0
	for entry := range strings.FieldsSeq(v) {
		entries++
		if entries > MaxSignatureEntries {
			return sigs, tooManyEntries()
		}
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version == "" {
			return sigs, fmt.Errorf("entry %d is not version,signature", entries)
		}
		var list *[][]byte
		switch version {
		case "v1":
			list = &sigs.v1
		case "v1a":
			list = &sigs.v1a
		default:
			continue
		}
		decoded, err := Base64.decode(sig)
		if err != nil {
			return sigs, fmt.Errorf("entry %d: %w", entries, err)
		}
		*list = append(*list, decoded)
	}
	if entries == 0 {
		return sigs, errors.New("no entries")
	}
	return sigs, nil
}
