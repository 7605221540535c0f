package signature

import (
	"encoding/json"
	"strings"
)

// Extract returns the event id and type that l points at in r: the id from
// IDHeader, else AltIDHeader, else the IDField of a JSON body; the type from
// TypeHeader, else TypeField. A value that is absent, or a body field that is
// neither a string nor a number, comes back empty, so the caller can fall
// back to its own defaults. Extract never fails: a body that is not JSON just
// holds no fields.
func (l EventLocation) Extract(r *Request) (id, eventType string) {
	if r == nil {
		return "", ""
	}
	id = firstHeader(r, l.IDHeader, l.AltIDHeader)
	eventType = firstHeader(r, l.TypeHeader)
	var body *jsonObject
	if id == "" && l.IDField != "" {
		body = parseJSONObject(r.Body)
		id = body.field(l.IDField)
	}
	if eventType == "" && l.TypeField != "" {
		if body == nil {
			body = parseJSONObject(r.Body)
		}
		eventType = body.field(l.TypeField)
	}
	return id, eventType
}

// firstHeader returns the first non-empty value among the named headers;
// empty names are skipped.
func firstHeader(r *Request, names ...string) string {
	for _, name := range names {
		if name == "" {
			continue
		}
		if v := strings.TrimSpace(r.Header.Get(name)); v != "" {
			return v
		}
	}
	return ""
}

// jsonObject is a JSON object decoded one level deep; nested objects are
// decoded when a dotted path reaches them.
type jsonObject struct{ fields map[string]json.RawMessage }

func parseJSONObject(raw []byte) *jsonObject {
	o := &jsonObject{}
	if err := json.Unmarshal(raw, &o.fields); err != nil {
		o.fields = nil
	}
	return o
}

// field returns the string or number at a dotted path ("event.type"), or ""
// when the path leads nowhere or to another kind of value.
func (o *jsonObject) field(path string) string {
	fields := o.fields
	for {
		name, rest, nested := strings.Cut(path, ".")
		raw, ok := fields[name]
		if !ok {
			return ""
		}
		if nested {
			fields = nil
			if err := json.Unmarshal(raw, &fields); err != nil {
				return ""
			}
			path = rest
			continue
		}
		return scalarText(raw)
	}
}

// scalarText renders a JSON string as its text and a JSON number as its
// literal; anything else is "".
func scalarText(raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		return n.String()
	}
	return ""
}
