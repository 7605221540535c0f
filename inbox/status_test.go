package inbox

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/inboxjob"
)

// TestStatusesAreTheEngines: the public statuses are the strings the
// engines store and compare.
func TestStatusesAreTheEngines(t *testing.T) {
	t.Parallel()
	require.Equal(t, inboxjob.StatusReceived, string(StatusReceived))
	require.Equal(t, inboxjob.StatusProcessed, string(StatusProcessed))
	require.Equal(t, inboxjob.StatusFailed, string(StatusFailed))
	require.Equal(t, inboxjob.StatusDead, string(StatusDead))
}
