package inboxjob

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNewNamesWhatConfigLacks: a Config without its required fields is
// refused with every problem named.
func TestNewNamesWhatConfigLacks(t *testing.T) {
	t.Parallel()
	_, err := New(&Config{MaxAttempts: -1})
	require.ErrorIs(t, err, errInvalidConfig)
	for _, want := range []string{"no River client", "no Queue", "MaxAttempts -1 is below 1", "no Now"} {
		require.ErrorContains(t, err, want)
	}
}
