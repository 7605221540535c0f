package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/wharfhq/wharf/signature"
)

// sendTimeout bounds one `wharf send` request.
const sendTimeout = 30 * time.Second

// maxSendResponse is how much of the answer `wharf send` prints.
const maxSendResponse = 64 << 10

// headerFlags collects repeated -H "Name: value" flags.
type headerFlags http.Header

func (h headerFlags) String() string { return "" }

func (h headerFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return fmt.Errorf("header %q is not Name: value", v)
	}
	http.Header(h).Add(name, strings.TrimSpace(value))
	return nil
}

// runSend signs a body with a scheme and POSTs it: the first webhook a
// newcomer sends, and a way to try a receiver by hand.
func runSend(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "send", "")
	target := fs.String("url", "", "the receiver's URL (required)")
	secret := fs.String("secret", "", "the signing secret (default $WHARF_SEND_SECRET; prefer it: flags land in shell history)")
	id := fs.String("id", "", "the event id: webhook-id (standard), the body's \"id\" (stripe), X-GitHub-Delivery (github); default a fresh one (stripe: the body's own id when it has one)")
	scheme := fs.String("scheme", "standard", "the signature scheme: standard (Standard Webhooks), stripe or github")
	headers := headerFlags{}
	fs.Var(headers, "H", `an extra request header, "Name: value" (repeatable; github: -H "X-GitHub-Event: push")`)
	fs.Usage = func() {
		fmt.Fprintln(e.errOut, "usage: wharf send -url URL [-secret SECRET] [-id ID] [-scheme standard|stripe|github] [-H 'Name: value']... BODY")
		fmt.Fprintln(e.errOut, "\nBODY is the JSON to send, inline or @file. Prints the answer's status and body;")
		fmt.Fprintln(e.errOut, "exits 1 when the answer is not 2xx.")
		fs.PrintDefaults()
	}
	positional, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(positional) != 1 {
		return usageError{"want one BODY argument (inline JSON, or @file)"}
	}
	if *secret == "" {
		*secret = os.Getenv("WHARF_SEND_SECRET")
	}
	switch {
	case *target == "":
		return usageError{"-url is required"}
	case *secret == "":
		return usageError{"no secret: pass -secret or set WHARF_SEND_SECRET"}
	}
	u, err := url.Parse(*target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError{fmt.Sprintf("-url %q is not an http(s) URL", *target)}
	}
	body, err := readBody(positional[0])
	if err != nil {
		return err
	}
	signed, err := signFor(*scheme, *secret, *id, body)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(signed.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "wharf-send")
	for name, values := range signed.header {
		req.Header[name] = values
	}
	for name, values := range headers {
		req.Header[name] = values
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxSendResponse))
	if err != nil {
		return fmt.Errorf("read the answer: %w", err)
	}
	fmt.Fprintf(e.out, "event id: %s\n%s %s\n%s\n", signed.id, resp.Proto, resp.Status, bytes.TrimRight(answer, "\n"))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return nil
}

// readBody reads BODY: inline, or the file after "@".
func readBody(arg string) ([]byte, error) {
	body := []byte(arg)
	if name, ok := strings.CutPrefix(arg, "@"); ok {
		var err error
		if body, err = os.ReadFile(name); err != nil {
			return nil, fmt.Errorf("body: %w", err)
		}
	}
	if !json.Valid(body) {
		return nil, usageError{"BODY is not valid JSON"}
	}
	return body, nil
}

// signedRequest is a body, the headers that sign it and the event id it
// carries.
type signedRequest struct {
	body   []byte
	header http.Header
	id     string
}

// freshEventID returns a new event id.
func freshEventID() string { return "evt_" + strings.ReplaceAll(uuid.NewString(), "-", "") }

// signFor signs body with scheme, placing id (a fresh one when empty)
// where that scheme's receivers read the event id. A Stripe body keeps its
// own "id" unless id is given: sent twice, a captured event is a
// duplicate.
func signFor(scheme, secret, id string, body []byte) (*signedRequest, error) {
	now := time.Now()
	switch scheme {
	case "standard":
		id = cmp.Or(id, freshEventID())
		h, err := signature.SignStandardWebhooks([]string{secret}, id, now, body)
		if err != nil {
			return nil, fmt.Errorf("sign: %w", err)
		}
		return &signedRequest{body: body, header: h, id: id}, nil
	case "stripe":
		body, id, err := stripeEvent(body, id)
		if err != nil {
			return nil, err
		}
		h, err := signature.SignStripe([]string{secret}, now, body)
		if err != nil {
			return nil, fmt.Errorf("sign: %w", err)
		}
		return &signedRequest{body: body, header: h, id: id}, nil
	case "github":
		id = cmp.Or(id, freshEventID())
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		h := http.Header{}
		h.Set(signature.HeaderGitHubSignature256, "sha256="+hex.EncodeToString(mac.Sum(nil)))
		h.Set(signature.HeaderGitHubDelivery, id)
		return &signedRequest{body: body, header: h, id: id}, nil
	}
	return nil, usageError{fmt.Sprintf("unknown -scheme %q: want standard, stripe or github", scheme)}
}

// stripeEvent returns a Stripe body and its event id, the body's "id":
// the body as it is when id is empty and it has one; otherwise with "id"
// set to id (or a fresh one).
func stripeEvent(body []byte, id string) ([]byte, string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // numbers pass through unchanged
	var event map[string]any
	if err := dec.Decode(&event); err != nil || event == nil {
		return nil, "", usageError{"-scheme stripe needs a JSON object BODY (its \"id\" is the event id)"}
	}
	if own, ok := event["id"].(string); ok && own != "" && id == "" {
		return body, own, nil
	}
	event["id"] = cmp.Or(id, freshEventID())
	out, err := json.Marshal(event)
	return out, event["id"].(string), err
}
