package process

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNewNamesWhatConfigLacks: a Config without its required fields is
// refused with every problem named, the Processor's and the Rescuer's.
func TestNewNamesWhatConfigLacks(t *testing.T) {
	t.Parallel()
	_, err := New(&Config{})
	require.ErrorIs(t, err, errInvalidConfig)
	for _, want := range []string{"no Pool", "no Jobs", "no Ordering", "no Registry", "no Metrics", "no Logger", "no Tracer", "no Now", "Transactions 0 is below 1"} {
		require.ErrorContains(t, err, want)
	}
	_, err = NewRescuer(&RescuerConfig{})
	require.ErrorIs(t, err, errInvalidConfig)
	for _, want := range []string{"rescuer: no Pool", "rescuer: no Jobs", "rescuer: no Ordering", "rescuer: no Logger", "rescuer: no Now",
		"rescuer: After 0s is not positive", "rescuer: Interval 0s is not positive"} {
		require.ErrorContains(t, err, want)
	}
}
