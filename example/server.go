package main

import (
	"net/http"
	"time"
)

// newServer returns the HTTP server the example serves h with: the settings
// the README recommends for a webhook receiver. A client that sends its
// headers or body slowly is cut off instead of holding a handler, and one
// that never reads its answer cannot hold the connection either. The inbox
// reads the whole body (at most Source.MaxBodyBytes) before it takes a
// database connection, so a slow client costs a goroutine, never a
// connection.
func newServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}
