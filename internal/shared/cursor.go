package shared

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// errCursor is wrapped by the packages' ErrInvalidCursor errors.
var errCursor = errors.New("malformed cursor")

// maxCursorLength bounds what DecodeTimeCursor and DecodeSeqCursor read: a
// cursor arrives from a query string or a command line.
const maxCursorLength = 128

// EncodeTimeCursor returns the opaque list cursor of a row ordered by (t,
// id): URL-safe base64 of "<unix microseconds>.<uuid>".
func EncodeTimeCursor(t time.Time, id uuid.UUID) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(t.UnixMicro(), 10) + "." + id.String()))
}

// DecodeTimeCursor reads what EncodeTimeCursor wrote, refusing anything
// else with an error that quotes nothing of the input.
func DecodeTimeCursor(s string) (time.Time, uuid.UUID, error) {
	raw, err := decode(s)
	if err != nil {
		return time.Time{}, uuid.Nil, err
	}
	micros, id, ok := strings.Cut(raw, ".")
	if !ok {
		return time.Time{}, uuid.Nil, errCursor
	}
	n, err := strconv.ParseInt(micros, 10, 64)
	if err != nil || n < -62135596800000000 || n > 253402300799999999 { // years 1 to 9999
		return time.Time{}, uuid.Nil, errCursor
	}
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 {
		return time.Time{}, uuid.Nil, errCursor
	}
	return time.UnixMicro(n).UTC(), u, nil
}

// EncodeSeqCursor returns the opaque list cursor of a row ordered by a
// sequence number.
func EncodeSeqCursor(n int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("s" + strconv.FormatInt(n, 10)))
}

// DecodeSeqCursor reads what EncodeSeqCursor wrote.
func DecodeSeqCursor(s string) (int64, error) {
	raw, err := decode(s)
	if err != nil {
		return 0, err
	}
	digits, ok := strings.CutPrefix(raw, "s")
	if !ok {
		return 0, errCursor
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n < 0 {
		return 0, errCursor
	}
	return n, nil
}

func decode(s string) (string, error) {
	if s == "" || len(s) > maxCursorLength {
		return "", errCursor
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return "", errCursor
	}
	return string(raw), nil
}
