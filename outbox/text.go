package outbox

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// checkText returns an error naming field when s cannot be stored in a
// Postgres text column: it holds a NUL byte or is not valid UTF-8. Postgres
// would refuse such a value with an error that aborts the transaction
// (the caller's, for PublishTx and the …Tx methods), so every text a caller
// gives is checked before any statement runs. The error never quotes s.
func checkText(field, s string) error {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return fmt.Errorf("%s has a NUL byte at byte %d", field, i)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not valid UTF-8 (byte %d)", field, invalidUTF8At(s))
	}
	return nil
}

// invalidUTF8At returns the offset of the first byte of s that does not
// start a valid UTF-8 sequence.
func invalidUTF8At(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return i
			}
		}
	}
	return len(s)
}
