package outbox

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSecretKeys(t *testing.T) {
	t.Parallel()
	k1 := bytes.Repeat([]byte{1}, 32)
	k2 := bytes.Repeat([]byte{2}, 32)
	b64 := base64.StdEncoding.EncodeToString
	keys, err := ParseSecretKeys(" 2026-11:" + b64(k2) + " ,2026-05:" + b64(k1))
	require.NoError(t, err)
	require.Equal(t, []SecretKey{{ID: "2026-11", Key: k2}, {ID: "2026-05", Key: k1}}, keys)

	keys, err = ParseSecretKeys("  ")
	require.NoError(t, err)
	require.Empty(t, keys)

	short := b64(k1[:31])
	for _, s := range []string{
		"k1",
		"k1:" + b64(k1) + ",",
		":" + b64(k1),
		"k:1:" + b64(k1),
		"k1:" + short,
		"k1:!" + b64(k1),
	} {
		_, err := ParseSecretKeys(s)
		require.ErrorIs(t, err, ErrInvalidConfig, s)
		require.NotContains(t, err.Error(), b64(k1)[:8], "never quotes a key")
		require.NotContains(t, err.Error(), short[:8])
	}
}

func TestSecretKeyNeverPrinted(t *testing.T) {
	t.Parallel()
	k := SecretKey{ID: "k1", Key: []byte("0123456789abcdef0123456789abcdef")}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "key", k, "keys", []SecretKey{k})
	js, err := json.Marshal(Config{SecretKeys: []SecretKey{k}}.SecretKeys)
	require.NoError(t, err)
	for _, out := range []string{
		fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s", k, k, k, k), fmt.Sprintf("%v", []SecretKey{k}),
		fmt.Sprintf("%+v", Config{SecretKeys: []SecretKey{k}}), logs.String(), string(js),
	} {
		require.Contains(t, out, "k1")
		require.NotContains(t, out, "0123456789")
		require.NotContains(t, out, base64.StdEncoding.EncodeToString(k.Key)[:10])
		require.NotContains(t, out, "30313233") // hex
	}
}
