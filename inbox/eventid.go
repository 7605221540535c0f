package inbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// HeaderEventID is the generic event-id header, read only when the source's
// verifier signs it or the source names it as its IDHeader.
const HeaderEventID = "X-Event-ID"

const (
	// MaxEventIDLength is the longest event id accepted, in characters.
	MaxEventIDLength = 512
	// MaxEventTypeLength is the longest event type accepted, in characters.
	MaxEventTypeLength = 256
)

// errInvalidEventID marks an event id that cannot be stored.
var errInvalidEventID = errors.New("invalid event id")

// parsedBody is a request body decoded once for id, type and hashing.
type parsedBody struct {
	raw   []byte
	value any  // decoded JSON with numbers kept as json.Number; nil when not JSON
	json  bool // whether raw is valid JSON
}

// parseBody decodes raw when it is one JSON value, as json.Valid defines it,
// in one decoding: the decoder validates what it reads (a json.Valid first
// scanned every body once more, a third of the cost of parsing it).
func parseBody(raw []byte) parsedBody {
	p := parsedBody{raw: raw}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return p
	}
	// The decoder stops after the first value: only JSON whitespace may
	// follow it.
	for _, c := range raw[dec.InputOffset():] {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return p
		}
	}
	p.value, p.json = v, true
	return p
}

// identify returns the event id and type of a request, following the
// source's priority: its id header (see Source.idHeaders), its body fields,
// then the SHA-256 of the canonical JSON (of the raw body when it is not
// JSON).
func (s *Source) identify(h http.Header, body parsedBody) (id, eventType string, err error) {
	id, err = s.eventID(h, body)
	if err != nil {
		return "", "", err
	}
	for _, name := range s.typeHeaders() {
		if eventType = strings.TrimSpace(h.Get(name)); eventType != "" {
			break
		}
	}
	if eventType == "" {
		for _, field := range s.typeFields() {
			if v, ok := lookupScalar(body.value, field); ok {
				eventType = v
				break
			}
		}
	}
	if !validText(eventType, 0, MaxEventTypeLength) {
		return "", "", fmt.Errorf("%w: event type is not at most %d characters of UTF-8 without NUL", errInvalidEventID, MaxEventTypeLength)
	}
	return id, eventType, nil
}

func (s *Source) eventID(h http.Header, body parsedBody) (string, error) {
	for _, name := range s.idHeaders() {
		if v := strings.TrimSpace(h.Get(name)); v != "" {
			return checkEventID(v, name)
		}
	}
	for _, field := range s.idFields() {
		if v, ok := lookupScalar(body.value, field); ok {
			return checkEventID(v, "body field "+field)
		}
	}
	return "sha256:" + hex.EncodeToString(s.payloadHash(body)), nil
}

func checkEventID(v, where string) (string, error) {
	if !validText(v, 1, MaxEventIDLength) {
		return "", fmt.Errorf("%w: %s is not 1–%d characters of UTF-8 without NUL", errInvalidEventID, where, MaxEventIDLength)
	}
	return v, nil
}

// payloadHash fingerprints a body: SHA-256 of its canonical JSON without the
// source's volatile fields, or of the raw bytes when it is not JSON.
func (s *Source) payloadHash(body parsedBody) []byte {
	if !body.json {
		sum := sha256.Sum256(body.raw)
		return sum[:]
	}
	var buf bytes.Buffer
	writeCanonical(&buf, body.value, "", s.HashExcludeFields)
	sum := sha256.Sum256(buf.Bytes())
	return sum[:]
}

// lookupScalar returns the string or number at a dotted path of a decoded
// JSON value. Objects, arrays, booleans, null and empty strings are absent.
func lookupScalar(v any, path string) (string, bool) {
	for part := range strings.SplitSeq(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		if v, ok = obj[part]; !ok {
			return "", false
		}
	}
	switch x := v.(type) {
	case string:
		x = strings.TrimSpace(x)
		return x, x != ""
	case json.Number:
		return x.String(), true
	}
	return "", false
}

// writeCanonical writes v as compact JSON with object keys sorted, leaving
// out the object members whose dotted path is in exclude.
func writeCanonical(buf *bytes.Buffer, v any, path string, exclude []string) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			if !slices.Contains(exclude, joinPath(path, k)) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k)
			buf.WriteByte(':')
			writeCanonical(buf, x[k], joinPath(path, k), exclude)
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			// Array elements share their array's path: excluding "items.at"
			// drops "at" from every element of "items".
			writeCanonical(buf, e, path, exclude)
		}
		buf.WriteByte(']')
	case string:
		writeString(buf, x)
	case json.Number:
		buf.WriteString(x.String())
	case bool:
		if x {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	default: // nil
		buf.WriteString("null")
	}
}

func writeString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // cannot fail for a string
	buf.Truncate(buf.Len() - 1)
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
