package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/operator"
)

// MaxOrderingKeyLength is the longest ordering key accepted, in characters.
const MaxOrderingKeyLength = 512

// orderingKey returns the ordering key of a request to s: its
// OrderingHeader, else the first of its OrderingFields present in the body
// as a string or number; "" when the source orders nothing or the request
// has no key.
func (s *Source) orderingKey(h http.Header, body parsedBody) string {
	if s.OrderingHeader != "" {
		if v := strings.TrimSpace(h.Get(s.OrderingHeader)); v != "" {
			return storableKey(v)
		}
	}
	for _, field := range s.OrderingFields {
		if v, ok := lookupScalar(body.value, field); ok && v != "" {
			return storableKey(v)
		}
	}
	return ""
}

// storableKey is v, or "sha256:" and its hex SHA-256 when v is too long or
// not storable text: one key still maps to one sequence.
func storableKey(v string) string {
	if validText(v, 1, MaxOrderingKeyLength) {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Skip dead-letters a message that is still to process or failing, on an
// operator's word, with reason as its last error, and deletes its waiting
// job: the later messages of its ordering key then go on. Like any dead
// message it can be replayed (which holds the later ones again, if they
// are still unfinished). It returns an error where errors.Is(err,
// ErrNotFound) is true for an unknown id, and ErrNotSkippable for a
// message already processed or dead.
func (ib *Inbox) Skip(ctx context.Context, id uuid.UUID, reason string) error {
	return ib.txFunc(ctx, func(tx pgx.Tx) error { return ib.SkipTx(ctx, tx, id, reason) })
}

// ErrNotSkippable is returned by Skip for a message that is processed or
// already dead.
var ErrNotSkippable = operator.ErrNotSkippable

// SkipTx is Skip in tx.
func (ib *Inbox) SkipTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, reason string) error {
	return ib.operator.SkipTx(ctx, tx, id, reason)
}
