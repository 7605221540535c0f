package outbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/wharfhq/wharf/internal/catalog"
)

// EventType is an entry of the event catalog: a type the application
// publishes, described for the people who subscribe to it.
type EventType struct {
	// Name is the type, as Event.Type.
	Name string
	// Description says, for the application's customers, when the event
	// is sent.
	Description string
	// Schema is the JSON Schema the event's data (Event.Data, not the
	// envelope) must match; nil accepts any data. Catalog.Compile reads
	// it.
	Schema json.RawMessage
	// Example is the data of an example event: shown in the portal and
	// sent by a test event. Required with a Schema, which it must match.
	Example json.RawMessage
	// Deprecated marks a type subscribers should move away from.
	Deprecated bool
}

// Catalog lists the event types the application publishes: the portal
// shows them, and PublishTx checks each event's data against its type's
// schema inside the publishing transaction, so a payload that would break
// a receiver fails the application's transaction instead.
type Catalog struct {
	// Types are the event types.
	Types []EventType
	// Strict refuses to publish a type Types does not list, and refuses
	// endpoint filters that name one (an exact type not listed, or a
	// "prefix.*" matching none). Without it, unlisted types are published
	// unchecked and filters are not checked, so a catalog can be adopted
	// one type at a time.
	Strict bool
	// Compile compiles a type's Schema into a validator. The
	// github.com/wharfhq/wharf/jsonschema module's Compiler is JSON Schema
	// draft 2020-12; it is a module of its own, so the outbox needs no
	// schema library. Needed when a type has a Schema.
	Compile SchemaCompiler
}

// SchemaCompiler compiles a JSON Schema into a SchemaValidator, or returns
// why it cannot.
type SchemaCompiler func(schema json.RawMessage) (SchemaValidator, error)

// SchemaValidator checks an event's data against one schema. Its error
// should be, or wrap, a *SchemaViolation naming where the data fails.
type SchemaValidator interface {
	Validate(data json.RawMessage) error
}

// SchemaViolation is where an event's data fails its schema.
type SchemaViolation = catalog.Violation

// EventDataError is PublishTx's error for an event its catalog refuses:
// errors.Is(err, ErrInvalidEvent) is true.
type EventDataError struct {
	// Type is the event's type.
	Type string
	// Pointer is the JSON pointer into the event's data where it fails
	// its schema ("" for the data as a whole, or an unknown type).
	Pointer string
	// Reason says why.
	Reason string
}

func (e *EventDataError) Error() string {
	where := ""
	if e.Pointer != "" {
		where = " at " + e.Pointer
	}
	return fmt.Sprintf("%s: data of %q%s: %s", ErrInvalidEvent, e.Type, where, e.Reason)
}

// Is matches ErrInvalidEvent.
func (e *EventDataError) Is(target error) bool { return target == ErrInvalidEvent }

// EventTypes returns the catalog's types and the operational ones
// (EventEndpointDisabled…), by name.
func (o *Outbox) EventTypes() []EventType {
	types := o.catalog.Types()
	out := make([]EventType, len(types))
	for i, t := range types {
		out[i] = EventType(t)
	}
	return out
}

// EventTypeByName returns the catalog's type named name.
func (o *Outbox) EventTypeByName(name string) (EventType, bool) {
	t, ok := o.catalog.Lookup(name)
	return EventType(t), ok
}

// compileCatalog compiles Config.Catalog (nil: an empty, lax one) with
// the operational types.
func compileCatalog(c *Catalog) (*catalog.Catalog, error) {
	if c == nil {
		c = &Catalog{}
	}
	types := make([]catalog.Type, 0, len(c.Types)+len(operationalTypes))
	for _, t := range c.Types {
		if strings.HasPrefix(t.Name, reservedPrefix) {
			return nil, fmt.Errorf("%w: Catalog: type %q: types starting %q are the outbox's own", ErrInvalidConfig, t.Name, reservedPrefix)
		}
		types = append(types, catalog.Type(t))
	}
	for _, t := range operationalTypes {
		types = append(types, catalog.Type(t))
	}
	var compile catalog.Compiler
	if c.Compile != nil {
		compile = func(schema json.RawMessage) (catalog.Validator, error) { return c.Compile(schema) }
	}
	compiled, err := catalog.New(&catalog.Config{
		Types: types, Strict: c.Strict, Compile: compile,
		CheckName: checkEventType,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: Catalog: %w", ErrInvalidConfig, err)
	}
	return compiled, nil
}

// checkData checks an event's data against the catalog.
func checkData(c *catalog.Catalog, eventType string, data json.RawMessage) error {
	err := c.Validate(eventType, data)
	if err == nil {
		return nil
	}
	out := &EventDataError{Type: eventType, Reason: err.Error()}
	var v *catalog.Violation
	if errors.As(err, &v) {
		out.Pointer, out.Reason = v.Pointer, v.Message
	}
	return out
}
