package shared

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestCursors(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 1, 2, 3, 456789000, time.UTC)
	id := uuid.MustParse("01a20b27-0bbf-776e-ba17-0aefbfdee7f0")
	gotAt, gotID, err := DecodeTimeCursor(EncodeTimeCursor(at, id))
	require.NoError(t, err)
	require.True(t, at.Equal(gotAt))
	require.Equal(t, id, gotID)
	n, err := DecodeSeqCursor(EncodeSeqCursor(42))
	require.NoError(t, err)
	require.EqualValues(t, 42, n)
	for _, bad := range []string{"", "!!", EncodeSeqCursor(1), "bm9wZQ", EncodeTimeCursor(at, id)[:10]} {
		_, _, err := DecodeTimeCursor(bad)
		require.ErrorIs(t, err, errCursor, "%q", bad)
	}
	_, err = DecodeSeqCursor(EncodeTimeCursor(at, id))
	require.ErrorIs(t, err, errCursor)
}

func FuzzDecodeCursors(f *testing.F) {
	f.Add(EncodeTimeCursor(time.Now(), uuid.New()))
	f.Add(EncodeSeqCursor(7))
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		if at, id, err := DecodeTimeCursor(s); err == nil {
			again, againID, err := DecodeTimeCursor(EncodeTimeCursor(at, id))
			if err != nil || !again.Equal(at) || againID != id {
				t.Fatalf("%q does not round-trip", s)
			}
		}
		if n, err := DecodeSeqCursor(s); err == nil && n < 0 {
			t.Fatalf("%q decoded to %d", s, n)
		}
	})
}
