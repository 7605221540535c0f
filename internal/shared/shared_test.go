package shared

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestMicro(t *testing.T) {
	t.Parallel()
	in := time.Date(2026, 11, 23, 10, 0, 0, 123456789, time.FixedZone("x", 3600))
	got := Micro(in)
	require.Equal(t, time.UTC, got.Location())
	require.Equal(t, 123456000, got.Nanosecond())
	require.True(t, got.Equal(in.Truncate(time.Microsecond)))
}

func TestText(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a\uFFFDb\uFFFD", Text("a\x00b\xff", 0))
	require.Equal(t, "short", Text("short", 10))
	long := strings.Repeat("é", 100) // 200 bytes
	cut := Text(long, 51)
	require.LessOrEqual(t, len(cut), 51)
	require.True(t, utf8.ValidString(cut))
	require.True(t, strings.HasSuffix(cut, "…"))
	require.Equal(t, "…", Text("abcdef", 2), "a limit under the marker keeps only the marker")
}

func FuzzText(f *testing.F) {
	f.Add("héllo\x00\xff", 5)
	f.Fuzz(func(t *testing.T, s string, max int) {
		max %= 1 << 16
		got := Text(s, max)
		if !utf8.ValidString(got) || strings.ContainsRune(got, 0) {
			t.Fatalf("Text(%q, %d) = %q: not storable", s, max, got)
		}
		if max >= len("…") && len(got) > max {
			t.Fatalf("Text(%q, %d) is %d bytes", s, max, len(got))
		}
	})
}

func TestProblems(t *testing.T) {
	t.Parallel()
	sentinel := errors.New("pkg: invalid config")
	p := NewProblems(sentinel)
	require.NoError(t, p.Err())
	p.Addf("A is %d", -1)
	p.Add(nil)
	p.Add(errors.New("B is empty"))
	p.Add(sentinel)
	err := p.Err()
	require.ErrorIs(t, err, sentinel)
	require.Equal(t, "pkg: invalid config: A is -1\npkg: invalid config: B is empty\npkg: invalid config", err.Error())
}
