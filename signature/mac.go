package signature

import (
	"context"
	"crypto/hmac"
	"crypto/sha1" // Twilio and some providers still sign with HMAC-SHA1.
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"
	"sync/atomic"
)

// HashAlgorithm names the hash an HMAC scheme uses.
type HashAlgorithm string

// The hashes NewHMAC supports.
const (
	SHA256 HashAlgorithm = "sha256"
	SHA512 HashAlgorithm = "sha512"
	SHA1   HashAlgorithm = "sha1"
)

// newHash returns the constructor for a, or an error for an unknown name.
func (a HashAlgorithm) newHash() (func() hash.Hash, error) {
	switch a {
	case SHA256:
		return sha256.New, nil
	case SHA512:
		return sha512.New, nil
	case SHA1:
		return sha1.New, nil
	}
	return nil, fmt.Errorf("unknown hash algorithm %q", string(a))
}

// Encoding names how a signature is written into its header.
type Encoding string

// The signature encodings NewHMAC supports.
const (
	// Hex is lower- or upper-case hexadecimal.
	Hex Encoding = "hex"
	// Base64 is standard base64 with padding.
	Base64 Encoding = "base64"
)

func (e Encoding) valid() bool { return e == Hex || e == Base64 }

// decode returns the signature bytes of s; an empty or undecodable s is an
// error that does not repeat s.
func (e Encoding) decode(s string) ([]byte, error) {
	var (
		b   []byte
		err error
	)
	switch e {
	case Hex:
		b, err = hex.DecodeString(s)
	case Base64:
		b, err = base64.StdEncoding.DecodeString(s)
	default:
		return nil, fmt.Errorf("unknown encoding %q", string(e))
	}
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("signature is not %s", string(e))
	}
	return b, nil
}

// encode writes a signature the way e reads it.
func (e Encoding) encode(b []byte) string {
	if e == Base64 {
		return base64.StdEncoding.EncodeToString(b)
	}
	return hex.EncodeToString(b)
}

// computeMAC returns the HMAC of the concatenated parts; the parts are
// written one by one so a large body is never copied.
func computeMAC(newHash func() hash.Hash, key []byte, parts ...[]byte) []byte {
	mac := hmac.New(newHash, key)
	for _, p := range parts {
		mac.Write(p)
	}
	return mac.Sum(nil)
}

// workCounter counts the MACs and signature verifications a verifier runs,
// the cryptographic work one request costs. Verifiers hold a nil one, which
// counts nothing; the package's tests set one to hold that work to its bound.
type workCounter struct{ n atomic.Int64 }

func (c *workCounter) add() {
	if c != nil {
		c.n.Add(1)
	}
}

// matchMAC returns nil when a candidate equals the MAC of one of the signed
// contents (several when the sender's exact content is ambiguous, as with
// Twilio's ports) under one of the keys, otherwise ErrNoMatch. Comparisons are
// constant-time. It computes at most len(keys) × len(contents) MACs, however
// many candidates there are.
func matchMAC(work *workCounter, newHash func() hash.Hash, keys, candidates [][]byte, contents ...[][]byte) error {
	for _, key := range keys {
		for _, content := range contents {
			work.add()
			expected := computeMAC(newHash, key, content...)
			for _, candidate := range candidates {
				if hmac.Equal(expected, candidate) {
					return nil
				}
			}
		}
	}
	return ErrNoMatch
}

// rawKeys returns the current secrets as HMAC keys, used as they are: most
// providers key the HMAC with the secret string's bytes.
func rawKeys(ctx context.Context, src SecretSource) ([][]byte, error) {
	all, err := secretsOf(ctx, src)
	if err != nil {
		return nil, err
	}
	keys := make([][]byte, len(all))
	for i, s := range all {
		keys[i] = []byte(s)
	}
	return keys, nil
}

// malformed reports an unparseable header by name and reason; the header's
// value stays out of the message.
func malformed(name, reason string) error {
	return fmt.Errorf("%w: %s: %s", ErrMalformedHeader, name, reason)
}

// tooManyEntries is the reason a signature header with more than
// MaxSignatureEntries entries is malformed.
func tooManyEntries() error {
	return fmt.Errorf("more than MaxSignatureEntries (%d) entries", MaxSignatureEntries)
}

// headerParam is one key=value entry of a structured signature header such
// as Stripe's "t=…,v1=…" or Paddle's "ts=…;h1=…".
type headerParam struct{ key, value string }

// parseHeaderParams splits v into key=value entries separated by sep,
// trimming spaces. An entry without "=" or with an empty key is an error
// naming its position, not its content; more than MaxSignatureEntries
// entries is an error too.
func parseHeaderParams(v, sep string) ([]headerParam, error) {
	if strings.Count(v, sep) >= MaxSignatureEntries {
		return nil, tooManyEntries()
	}
	var params []headerParam
	for i, entry := range strings.Split(v, sep) {
		key, value, ok := strings.Cut(strings.TrimSpace(entry), "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("entry %d is not key=value", i+1)
		}
		params = append(params, headerParam{key: key, value: value})
	}
	return params, nil
}
