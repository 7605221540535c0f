package portal_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/portal"
)

func TestZZLongTenantToken(t *testing.T) {
	f := newFixture(t, nil)
	for _, tenant := range []string{strings.Repeat("a", 256), strings.Repeat("<", 256), strings.Repeat("&", 250)} {
		tok, err := portal.NewToken(testKey, portal.Token{Tenant: tenant, Expires: time.Now().Add(time.Hour), ReadOnly: true})
		require.NoError(t, err)
		got := f.call(t, tok, "GET", "/endpoints", nil)
		t.Logf("tenant %q...(%d bytes): token %d chars -> %d", tenant[:3], len(tenant), len(tok), got.status)
	}
}
