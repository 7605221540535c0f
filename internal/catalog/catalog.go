// Package catalog holds the outbox's event catalog once compiled: the
// event types an application publishes, each with an optional schema of
// its data, and the checks PublishTx and endpoint filters make against it.
//
// It knows no JSON Schema itself: the application passes a compiler (the
// wharf/jsonschema module's, or its own), so the core module needs no
// schema library.
package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Type is one event type of the catalog.
type Type struct {
	Name        string
	Description string
	Schema      json.RawMessage
	Example     json.RawMessage
	Deprecated  bool
}

// Validator checks the data of one event type.
type Validator interface {
	Validate(data json.RawMessage) error
}

// Compiler makes a Validator of a schema.
type Compiler func(schema json.RawMessage) (Validator, error)

// Violation is a Validator's error: where in the data (a JSON pointer, ""
// for the whole) the data breaks the schema, and how.
type Violation struct {
	Pointer string
	Message string
}

func (v *Violation) Error() string {
	if v.Pointer == "" {
		return v.Message
	}
	return v.Pointer + ": " + v.Message
}

// Config is a catalog to compile.
type Config struct {
	Types   []Type
	Strict  bool
	Compile Compiler
	// CheckName refuses a name that is no event type.
	CheckName func(string) error
}

// Catalog is a compiled catalog. A nil *Catalog has no types and checks
// nothing.
type Catalog struct {
	types      []Type // by name
	validators map[string]Validator
	known      map[string]bool
	strict     bool
}

// New compiles cfg: every name checked and unique, every schema compiled
// and every example valid JSON that its schema accepts.
func New(cfg *Config) (*Catalog, error) {
	c := &Catalog{
		types:      slices.Clone(cfg.Types),
		validators: make(map[string]Validator),
		known:      make(map[string]bool, len(cfg.Types)),
		strict:     cfg.Strict,
	}
	var errs []error
	for i := range c.types {
		t := &c.types[i]
		if err := cfg.CheckName(t.Name); err != nil {
			errs = append(errs, fmt.Errorf("type %d: %w", i+1, err))
			continue
		}
		if c.known[t.Name] {
			errs = append(errs, fmt.Errorf("type %q is listed twice", t.Name))
			continue
		}
		c.known[t.Name] = true
		if len(t.Schema) > 0 {
			if len(t.Example) == 0 {
				// A test event sends the example: one that fails its
				// own schema could not be sent.
				errs = append(errs, fmt.Errorf("type %q has a schema but no example", t.Name))
				continue
			}
			if cfg.Compile == nil {
				errs = append(errs, fmt.Errorf("type %q has a schema but the catalog no Compile", t.Name))
				continue
			}
			v, err := cfg.Compile(t.Schema)
			if err != nil {
				errs = append(errs, fmt.Errorf("type %q: schema: %w", t.Name, err))
				continue
			}
			c.validators[t.Name] = v
		}
		if len(t.Example) > 0 {
			if !json.Valid(t.Example) {
				errs = append(errs, fmt.Errorf("type %q: example is not JSON", t.Name))
				continue
			}
			if err := c.Validate(t.Name, t.Example); err != nil {
				errs = append(errs, fmt.Errorf("type %q: example: %w", t.Name, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.SortFunc(c.types, func(a, b Type) int { return strings.Compare(a.Name, b.Name) })
	return c, nil
}

// Types returns the catalog's types, by name.
func (c *Catalog) Types() []Type {
	if c == nil {
		return nil
	}
	return slices.Clone(c.types)
}

// Lookup returns the type named name.
func (c *Catalog) Lookup(name string) (Type, bool) {
	if c == nil {
		return Type{}, false
	}
	i, ok := slices.BinarySearchFunc(c.types, name, func(t Type, name string) int { return strings.Compare(t.Name, name) })
	if !ok {
		return Type{}, false
	}
	return c.types[i], true
}

// ErrUnknownType is Validate's error for a type a strict catalog does not
// list.
var ErrUnknownType = errors.New("not in the event catalog")

// Validate checks the data of an event of type name: a strict catalog
// refuses a type it does not list; a listed type with a schema must
// match it (the error is then a *Violation, or wraps one).
func (c *Catalog) Validate(name string, data json.RawMessage) error {
	if c == nil {
		return nil
	}
	if !c.known[name] {
		if c.strict {
			return ErrUnknownType
		}
		return nil
	}
	v := c.validators[name]
	if v == nil {
		return nil
	}
	return v.Validate(data)
}

// CheckFilter refuses, in a strict catalog, an endpoint filter entry that
// names no listed type: an exact name it does not list, or a "prefix.*"
// that matches none. "*" is always accepted.
func (c *Catalog) CheckFilter(pattern string) error {
	if c == nil || !c.strict || pattern == "*" {
		return nil
	}
	if prefix, ok := strings.CutSuffix(pattern, ".*"); ok {
		for _, t := range c.types {
			if strings.HasPrefix(t.Name, prefix+".") {
				return nil
			}
		}
		return fmt.Errorf("%q matches no type of the event catalog", pattern)
	}
	if !c.known[pattern] {
		return fmt.Errorf("%q is not in the event catalog", pattern)
	}
	return nil
}
