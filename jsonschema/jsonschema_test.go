package jsonschema_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/jsonschema"
	"github.com/wharfhq/wharf/outbox"
)

const invoiceSchema = `{
	"$schema": "https://json-schema.org/draft/2020-12/schema",
	"type": "object",
	"required": ["id", "lines"],
	"properties": {
		"id": {"type": "string"},
		"lines": {"type": "array", "items": {"type": "object", "required": ["cents"],
			"properties": {"cents": {"type": "integer", "minimum": 0}}}},
		"a/b": {"type": "string"}
	}
}`

func TestCompileValidates(t *testing.T) {
	v, err := jsonschema.Compile(json.RawMessage(invoiceSchema))
	require.NoError(t, err)
	require.NoError(t, v.Validate(json.RawMessage(`{"id":"in_1","lines":[{"cents":5}]}`)))

	for _, tc := range []struct{ data, pointer string }{
		{`{"id":"in_1","lines":[{"cents":5},{"cents":-1}]}`, "/lines/1/cents"},
		{`{"id":7,"lines":[]}`, "/id"},
		{`{"lines":[]}`, ""},
		{`{"id":"x","lines":[],"a/b":1}`, "/a~1b"},
	} {
		err := v.Validate(json.RawMessage(tc.data))
		var sv *outbox.SchemaViolation
		require.True(t, errors.As(err, &sv), "%s: %v", tc.data, err)
		require.Equal(t, tc.pointer, sv.Pointer, tc.data)
		require.NotEmpty(t, sv.Message)
	}
}

func TestCompileRefusesBadSchemas(t *testing.T) {
	for _, schema := range []string{
		`{`,
		`{"type": 12}`,
		`{"$ref": "https://example.com/other.json"}`,
		`{"$ref": "file:///etc/passwd"}`,
	} {
		_, err := jsonschema.Compile(json.RawMessage(schema))
		require.Error(t, err, schema)
	}
}

func TestDefaultDraftIs2020(t *testing.T) {
	// prefixItems is 2020-12's: earlier drafts ignore it.
	v, err := jsonschema.Compile(json.RawMessage(`{"prefixItems": [{"type": "string"}]}`))
	require.NoError(t, err)
	require.Error(t, v.Validate(json.RawMessage(`[1]`)))
}
