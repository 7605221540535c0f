package ordering

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNewNamesWhatConfigLacks: a Config without its required fields is
// refused with every problem named.
func TestNewNamesWhatConfigLacks(t *testing.T) {
	t.Parallel()
	_, err := New(&Config{})
	require.ErrorIs(t, err, errInvalidConfig)
	for _, want := range []string{"no Jobs", "BatchSize 0 is below 1", "no Now"} {
		require.ErrorContains(t, err, want)
	}
}
