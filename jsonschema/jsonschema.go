// Package jsonschema checks outbox events against JSON Schema (draft
// 2020-12 unless a schema's $schema names another) with
// github.com/santhosh-tekuri/jsonschema/v6. It is a module of its own so
// that applications without an event catalog do not depend on a schema
// library:
//
//	out, err := outbox.New(pool, &outbox.Config{Catalog: &outbox.Catalog{
//		Types:   types,
//		Compile: jsonschema.Compile,
//	}})
//
// Schemas are self-contained: a $ref to another document is refused when
// the schema is compiled, so compiling never reads a file or the network.
package jsonschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	sjs "github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/wharfhq/wharf/outbox"
)

// schemaURL is where the compiler files the schema being compiled.
const schemaURL = "wharf:event-data-schema.json"

var printer = message.NewPrinter(language.English)

// Compile compiles schema into a validator of event data: an
// outbox.SchemaCompiler. Validation errors are *outbox.SchemaViolation,
// naming the JSON pointer of the first value that fails.
func Compile(schema json.RawMessage) (outbox.SchemaValidator, error) {
	doc, err := sjs.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	c := sjs.NewCompiler()
	c.DefaultDraft(sjs.Draft2020)
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	compiled, err := c.Compile(schemaURL)
	if err != nil {
		return nil, err
	}
	return &validator{schema: compiled}, nil
}

type validator struct{ schema *sjs.Schema }

// Validate checks data, which must be JSON.
func (v *validator) Validate(data json.RawMessage) error {
	inst, err := sjs.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return &outbox.SchemaViolation{Message: "not JSON"}
	}
	err = v.schema.Validate(inst)
	var ve *sjs.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	leaf := ve
	for len(leaf.Causes) > 0 {
		leaf = leaf.Causes[0]
	}
	return &outbox.SchemaViolation{Pointer: pointer(leaf.InstanceLocation), Message: leaf.ErrorKind.LocalizedString(printer)}
}

// pointer is the JSON pointer (RFC 6901) of a location.
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return b.String()
}

// noLoader refuses every document but the one being compiled.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s: a schema must be self-contained (no $ref to another document)", url)
}
