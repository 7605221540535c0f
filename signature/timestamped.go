package signature

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// timestampedFormat describes a scheme whose one header carries a signed
// timestamp and hex HMAC-SHA256 signatures as key=value entries, over the
// content "<timestamp><contentSep><body>", keyed by the secret's bytes:
// Stripe's "t=…,v1=…" and Paddle's "ts=…;h1=…".
type timestampedFormat struct {
	header       string // the signature header
	entrySep     string // between key=value entries
	timestampKey string // the entry holding unix seconds
	signatureKey string // the entries holding signatures; other keys are skipped
	contentSep   string // between timestamp and body in the signed content
}

// timestampedVerifier verifies one timestampedFormat; Stripe and Paddle
// embed it.
type timestampedVerifier struct {
	secrets SecretSource
	opts    *Options
	format  timestampedFormat
	events  EventLocation
	work    *workCounter
}

// Verify checks r's signature header. See the package documentation for
// errors.
func (v *timestampedVerifier) Verify(ctx context.Context, r *Request) error {
	return v.format.verify(ctx, v.secrets, v.opts, v.work, r)
}

// EventLocation reports where the provider puts the event id and type.
func (v *timestampedVerifier) EventLocation() EventLocation { return v.events }

// timestampedHeader is a parsed signature header.
type timestampedHeader struct {
	timestamp  string // as sent, because it is signed as sent
	signedAt   int64  // unix seconds
	signatures [][]byte
}

// parse reads a header value. Unknown keys are skipped, so new signature
// versions do not break verification; a missing or repeated timestamp, no
// signature of the known version, one that is not hex, or more than
// MaxSignatureEntries entries make it malformed.
func (f timestampedFormat) parse(v string) (timestampedHeader, error) {
	var h timestampedHeader
	params, err := parseHeaderParams(v, f.entrySep)
	if err != nil {
		return h, malformed(f.header, err.Error())
	}
	for _, p := range params {
		switch p.key {
		case f.timestampKey:
			if h.timestamp != "" {
				return h, malformed(f.header, "more than one "+f.timestampKey)
			}
			if h.signedAt, err = parseUnix(p.value); err != nil {
				return h, malformed(f.header, f.timestampKey+" is "+err.Error())
			}
			h.timestamp = p.value
		case f.signatureKey:
			sig, err := Hex.decode(p.value)
			if err != nil {
				return h, malformed(f.header, f.signatureKey+" "+err.Error())
			}
			h.signatures = append(h.signatures, sig)
		}
	}
	if h.timestamp == "" {
		return h, malformed(f.header, "no "+f.timestampKey)
	}
	if len(h.signatures) == 0 {
		return h, malformed(f.header, "no "+f.signatureKey+" signature")
	}
	return h, nil
}

// content returns the signed content for a timestamp and body.
func (f timestampedFormat) content(timestamp string, body []byte) [][]byte {
	return [][]byte{[]byte(timestamp), []byte(f.contentSep), body}
}

// verify checks r under f: header, timestamp tolerance, then signatures.
func (f timestampedFormat) verify(ctx context.Context, src SecretSource, opts *Options, work *workCounter, r *Request) error {
	raw, err := signatureHeader(r.Header, f.header)
	if err != nil {
		return err
	}
	h, err := f.parse(raw)
	if err != nil {
		return err
	}
	if err := opts.checkTimestamp(h.signedAt); err != nil {
		return err
	}
	keys, err := rawKeys(ctx, src)
	if err != nil {
		return err
	}
	return matchMAC(work, sha256.New, keys, h.signatures, f.content(h.timestamp, r.Body))
}

// sign returns the header value for body signed at ts with every secret,
// one signature entry per secret.
func (f timestampedFormat) sign(secrets []string, ts time.Time, body []byte) (string, error) {
	keys, err := rawKeys(context.Background(), Secrets(secrets))
	if err != nil {
		return "", err
	}
	timestamp := strconv.FormatInt(ts.Unix(), 10)
	entries := []string{fmt.Sprintf("%s=%s", f.timestampKey, timestamp)}
	for _, key := range keys {
		sig := computeMAC(sha256.New, key, f.content(timestamp, body)...)
		entries = append(entries, f.signatureKey+"="+Hex.encode(sig))
	}
	return strings.Join(entries, f.entrySep), nil
}
