package outbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	cfg, err := (*Config)(nil).withDefaults()
	require.NoError(t, err)
	require.Equal(t, DefaultQueue, cfg.Queue)
	require.Equal(t, DefaultRetrySchedule, cfg.RetrySchedule)
	require.Equal(t, 256<<10, cfg.MaxPayloadBytes)
	require.Equal(t, 16<<10, cfg.ResponseBodyLimit)
	require.Equal(t, 16<<10, cfg.ResponseHeaderLimit)
	require.Equal(t, 24*time.Hour, cfg.SecretRotationOverlap)
	require.Equal(t, 5*24*time.Hour, cfg.DisableAfter)
	require.Equal(t, 64, cfg.DeliveryBatchSize)
	require.Equal(t, time.Second, cfg.DeliveryBatchSpan)

	for name, bad := range map[string]*Config{
		"empty schedule":    {RetrySchedule: []time.Duration{}},
		"negative schedule": {RetrySchedule: []time.Duration{0, -time.Second}},
		"jitter":            {RetryJitter: 1.5},
		"timeout":           {EndpointTimeout: time.Hour},
		"max in flight":     {MaxInFlight: -3},
		"payload":           {MaxPayloadBytes: -1},
		"header limit":      {ResponseHeaderLimit: -1},
		"disable after":     {DisableAfter: -2},
		"batch size":        {DeliveryBatchSize: -1},
		"huge batch size":   {DeliveryBatchSize: maxDeliveryBatchSize + 1},
		"negative span":     {DeliveryBatchSpan: -time.Millisecond},
		"long span":         {DeliveryBatchSpan: time.Hour},
	} {
		_, err := bad.withDefaults()
		require.ErrorIs(t, err, ErrInvalidConfig, name)
	}
}
