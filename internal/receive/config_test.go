package receive

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNewNamesWhatConfigLacks: a Config without its required fields is
// refused with every problem named.
func TestNewNamesWhatConfigLacks(t *testing.T) {
	t.Parallel()
	_, err := New(&Config{BatchWait: -time.Millisecond})
	require.ErrorIs(t, err, errInvalidConfig)
	for _, want := range []string{"no Pool", "no Jobs", "BatchSize 0 is below 1", "BatchWait -1ms is negative", "Timeout 0s is not positive", "no Now"} {
		require.ErrorContains(t, err, want)
	}
}
