package pgxtx

import "github.com/google/uuid"

// UUIDTexts returns ids as text, the form in which queries take arrays of
// ids (@ids::text[], cast to uuid in SQL). pgx cannot encode a []uuid.UUID
// in the text format that its exec and simple_protocol modes use, the modes
// an application behind PgBouncer in transaction mode runs in; a []string it
// can encode in every mode.
func UUIDTexts(ids []uuid.UUID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}
