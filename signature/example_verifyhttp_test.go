package signature_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/wharfhq/wharf/signature"
)

// A service receiving Wharf's outbox webhooks verifies each request in one
// call, then reads the body as if nothing had touched it. The outbox signs
// with the endpoint's secret (EndpointCreate's Secret) under the Standard
// Webhooks headers, webhook-id being the event id.
func ExampleVerifyHTTP() {
	// From the receiver's secret store in an app; during a rotation, list
	// the new secret and the old one.
	endpointSecret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	verifier := signature.NewStandardWebhooks(signature.Secrets{endpointSecret}, nil)

	receiver := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := signature.VerifyHTTP(r.Context(), verifier, r, 64<<10)
		// The package's errors name the failed check, never a secret or a
		// signature: they may be answered as they are.
		switch {
		case errors.Is(err, signature.ErrBodyTooLarge):
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		case errors.Is(err, signature.ErrUnreadableBody):
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		case errors.Is(err, signature.ErrNoSecrets):
			http.Error(w, "verification unavailable; retry later", http.StatusServiceUnavailable)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var event struct {
			Type string `json:"type"`
			Data struct {
				Order string `json:"order"`
			} `json:"data"`
		}
		if err := json.NewDecoder(r.Body).Decode(&event); err != nil {
			http.Error(w, "body is not an event", http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%s %s %s", r.Header.Get(signature.HeaderWebhookID), event.Type, event.Data.Order)
	})

	// What the outbox sends for an order.created event.
	body := []byte(`{"type":"order.created","timestamp":"2026-11-23T10:00:00Z","data":{"order":"ord_1"}}`)
	header, err := signature.SignStandardWebhooks([]string{endpointSecret}, "evt_1", time.Now(), body)
	if err != nil {
		fmt.Println(err)
		return
	}
	send := func(name string, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/wharf", bytes.NewReader(body))
		maps.Copy(req.Header, header)
		rec := httptest.NewRecorder()
		receiver.ServeHTTP(rec, req)
		fmt.Printf("%s: %d %s\n", name, rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	send("as sent", body)
	send("tampered", bytes.Replace(body, []byte("ord_1"), []byte("ord_2"), 1))
	send("oversized", bytes.Repeat([]byte(" "), 65<<10))

	// Output:
	// as sent: 200 evt_1 order.created ord_1
	// tampered: 401 signature: no matching signature
	// oversized: 413 signature: body too large: longer than 65536 bytes
}
