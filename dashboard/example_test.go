package dashboard_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/wharfhq/wharf/dashboard"
	"github.com/wharfhq/wharf/internal/testdb"
)

// The dashboard is an http.Handler: mount it under a prefix of the app's
// mux, behind the app's own authentication.
func Example() {
	pool, cleanup := testdb.ForExample()
	defer cleanup()

	dash, err := dashboard.New(pool, &dashboard.Config{Prefix: "/ops/wharf", ReadOnly: true})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/wharf/", dash)
	server := httptest.NewServer(mux)
	defer server.Close()

	resp, err := http.Get(server.URL + "/ops/wharf/inbox?status=dead")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, strings.Contains(string(page), "No messages match."))
	// Output: 200 true
}
