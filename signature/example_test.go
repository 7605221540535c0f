package signature_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/wharfhq/wharf/signature"
)

// The endpoint's secret: "whsec_" and the base64 of the key. A real one comes
// from GenerateStandardSecret (or the sender's dashboard) and from a secret
// store, never from code.
const exampleSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// A sender signs the id, the timestamp and the body; the receiver gets the
// body and these three headers.
func ExampleSignStandardWebhooks() {
	body := []byte(`{"type":"payment.succeeded","data":{"account":"acct_1","amount":125}}`)
	sentAt := time.Unix(1700000000, 0)

	header, err := signature.SignStandardWebhooks([]string{exampleSecret}, "evt_1", sentAt, body)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(signature.HeaderWebhookID+":", header.Get(signature.HeaderWebhookID))
	fmt.Println(signature.HeaderWebhookTimestamp+":", header.Get(signature.HeaderWebhookTimestamp))
	fmt.Println(signature.HeaderWebhookSignature+":", header.Get(signature.HeaderWebhookSignature))

	// Output:
	// webhook-id: evt_1
	// webhook-timestamp: 1700000000
	// webhook-signature: v1,CvfpeL4zB7F0I2ONZ+k0W0CXzUzpfp8JPWWyscY6dxA=
}

// A receiver verifies over the raw body before it parses anything. The error
// of a rejected request says which check failed, never a secret or a
// signature; errors.Is tells the checks apart.
func ExampleNewStandardWebhooks() {
	ctx := context.Background()
	body := []byte(`{"type":"payment.succeeded","data":{"account":"acct_1","amount":125}}`)
	sentAt := time.Unix(1700000000, 0)
	header, err := signature.SignStandardWebhooks([]string{exampleSecret}, "evt_1", sentAt, body)
	if err != nil {
		fmt.Println(err)
		return
	}

	// Options.Now fixes the clock for the example; leave it nil in an app.
	receivedAt := sentAt.Add(2 * time.Second)
	verifier := signature.NewStandardWebhooks(signature.Secrets{exampleSecret},
		&signature.Options{Now: func() time.Time { return receivedAt }})

	err = verifier.Verify(ctx, &signature.Request{Method: http.MethodPost, Header: header, Body: body})
	fmt.Println("as sent:", err)

	tampered := []byte(`{"type":"payment.succeeded","data":{"account":"acct_1","amount":125000}}`)
	err = verifier.Verify(ctx, &signature.Request{Method: http.MethodPost, Header: header, Body: tampered})
	fmt.Println("tampered body:", errors.Is(err, signature.ErrNoMatch), err)

	// The same request captured and sent again an hour later.
	late := signature.NewStandardWebhooks(signature.Secrets{exampleSecret},
		&signature.Options{Now: func() time.Time { return sentAt.Add(time.Hour) }})
	err = late.Verify(ctx, &signature.Request{Method: http.MethodPost, Header: header, Body: body})
	fmt.Println("an hour later:", errors.Is(err, signature.ErrStaleTimestamp), err)

	// Output:
	// as sent: <nil>
	// tampered body: true signature: no matching signature
	// an hour later: true signature: timestamp outside tolerance: signed at unix 1700000000 (2023-11-14T22:13:20Z), 1h0m0s in the past, tolerance 5m0s
}

// During a secret rotation the receiver lists both secrets, newest first:
// a request signed with either verifies.
func ExampleSecrets_rotation() {
	ctx := context.Background()
	oldSecret := exampleSecret
	newSecret := "whsec_QkJ4cGZpb2QzNjJ6eGxrc2RmMDk4MjNqNHNkZjA5OA=="
	body := []byte(`{"type":"ping"}`)
	sentAt := time.Unix(1700000000, 0)
	verifier := signature.NewStandardWebhooks(signature.Secrets{newSecret, oldSecret},
		&signature.Options{Now: func() time.Time { return sentAt }})

	for _, secret := range []string{oldSecret, newSecret} {
		header, err := signature.SignStandardWebhooks([]string{secret}, "evt_2", sentAt, body)
		if err != nil {
			fmt.Println(err)
			return
		}
		err = verifier.Verify(ctx, &signature.Request{Method: http.MethodPost, Header: header, Body: body})
		fmt.Println(err)
	}

	// Output:
	// <nil>
	// <nil>
}

// Stripe signs the timestamp and the body into one Stripe-Signature header;
// the event id is the body's "id".
func ExampleNewStripe() {
	ctx := context.Background()
	const endpointSecret = "whsec_stripe_endpoint_secret" // Stripe's secrets are used as they are
	body := []byte(`{"id":"evt_3","type":"invoice.paid","data":{"object":{"amount_paid":1200}}}`)
	sentAt := time.Unix(1700000000, 0)

	header, err := signature.SignStripe([]string{endpointSecret}, sentAt, body) // what Stripe sends
	if err != nil {
		fmt.Println(err)
		return
	}
	verifier := signature.NewStripe(signature.Secrets{endpointSecret},
		&signature.Options{Now: func() time.Time { return sentAt.Add(time.Second) }})
	fmt.Println(verifier.Verify(ctx, &signature.Request{Method: http.MethodPost, Header: header, Body: body}))

	wrong := signature.NewStripe(signature.Secrets{"whsec_another_endpoint"},
		&signature.Options{Now: func() time.Time { return sentAt.Add(time.Second) }})
	err = wrong.Verify(ctx, &signature.Request{Method: http.MethodPost, Header: header, Body: body})
	fmt.Println(errors.Is(err, signature.ErrNoMatch))
	fmt.Println(verifier.EventLocation().IDField)

	// Output:
	// <nil>
	// true
	// id
}
