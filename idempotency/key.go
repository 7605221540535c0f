package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// HeaderKey is the request header carrying the client's idempotency key.
const HeaderKey = "Idempotency-Key"

// HeaderReplayed is set to "true" on a response replayed from storage rather
// than produced by the handler.
const HeaderReplayed = "Idempotent-Replayed"

// HeaderBodyOmitted is set to "true", beside HeaderReplayed, on a replay
// whose body is empty because the first response's body was larger than
// the middleware stores (Config.MaxStoredResponseBody): the status and
// headers are the first response's, the body is not.
const HeaderBodyOmitted = "Idempotent-Body-Omitted"

// MaxKeyLength is the longest idempotency key accepted, in bytes.
const MaxKeyLength = 255

var (
	errKeyMultiple  = errors.New("idempotency: more than one Idempotency-Key header")
	errKeyMalformed = fmt.Errorf("idempotency: invalid Idempotency-Key: it must be 1 to %d visible ASCII characters without quotes or backslashes, optionally in double quotes", MaxKeyLength)
)

// parseKey returns the request's idempotency key, or "" when it has none.
//
// The key is taken as sent (Stripe's form, `Idempotency-Key: 8e03…`) or as a
// structured-field string (the IETF draft's form, `Idempotency-Key: "8e03…"`):
// both name the same key. A header that is present but empty, repeated, too
// long, or holds anything but visible ASCII is an error, so that two requests
// can never be told apart by a byte the key does not show.
func parseKey(h http.Header) (string, error) {
	values := h.Values(HeaderKey)
	switch len(values) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", errKeyMultiple
	}
	v := strings.Trim(values[0], " \t")
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	if v == "" || len(v) > MaxKeyLength {
		return "", errKeyMalformed
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return "", errKeyMalformed
		}
	}
	return v, nil
}

// fingerprint identifies what a request asks for: its method, its target
// (escaped path and query) and its body. A key reused with a different
// fingerprint is a client error, not a retry.
func fingerprint(method, target string, body []byte) []byte {
	bodyHash := sha256.Sum256(body)
	h := sha256.New()
	// Method and target cannot contain NUL, so the separators are unambiguous.
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write([]byte(target))
	h.Write([]byte{0})
	h.Write(bodyHash[:])
	return h.Sum(nil)
}

// lockClass is the first key of the advisory locks taken on idempotency
// keys: "whik" as an int32. It differs from the class of Wharf's other locks
// (internal/partition) because lockKey hashes client input into 32 bits: a
// collision there must never make partition upkeep wait for a handler.
const lockClass int32 = 0x7768696b

// lockKey returns the second key of the advisory lock every claimant of
// (route, principal, key) takes. Distinct keys may collide; a collision only
// makes one of two simultaneous requests answer 409.
func lockKey(route, principal, key string) int32 {
	h := sha256.New()
	h.Write([]byte(route))
	h.Write([]byte{0})
	h.Write([]byte(principal))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return int32(binary.BigEndian.Uint32(h.Sum(nil)))
}
