package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/ops"
	"github.com/wharfhq/wharf/outbox"
)

func runOutbox(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usageError{"want endpoints, deliveries, replay or rescue"}
	}
	switch args[0] {
	case "endpoints":
		return runOutboxEndpoints(ctx, e, args[1:])
	case "deliveries":
		return runOutboxDeliveries(ctx, e, args[1:])
	case "replay":
		return runOutboxReplay(ctx, e, args[1:])
	case "rescue":
		return runOutboxRescue(ctx, e, args[1:])
	}
	return usageError{fmt.Sprintf("unknown outbox command %q: want endpoints, deliveries, replay or rescue", args[0])}
}

// runOutboxRescue runs Outbox.Rescue once, as the outbox's periodic job
// does.
func runOutboxRescue(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "outbox rescue", "[-queue Q]")
	queue := fs.String("queue", outbox.DefaultQueue, "the River queue for the new jobs: the outbox's (outbox.Config.Queue)")
	args, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(args) != 0 {
		return usageError{"outbox rescue takes no arguments"}
	}
	keys, err := secretKeys()
	if err != nil {
		return err
	}
	pool, err := e.connect(ctx)
	if err != nil {
		return err
	}
	ob, err := outbox.New(pool, &outbox.Config{Queue: *queue, SecretKeys: keys, Logger: e.libraryLogger()})
	if err != nil {
		return err
	}
	n, err := ob.Rescue(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.out, "settled %d delivery(ies) that no job would attempt: new jobs in queue %q, or dead-lettered\n", n, *queue)
	return nil
}

func (e *env) outbox(ctx context.Context, allowPrivate bool) (*outbox.Outbox, error) {
	keys, err := secretKeys()
	if err != nil {
		return nil, err
	}
	pool, err := e.connect(ctx)
	if err != nil {
		return nil, err
	}
	return outbox.New(pool, &outbox.Config{AllowPrivateNetworks: allowPrivate, SecretKeys: keys, Logger: e.libraryLogger()})
}

func parseID(what, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, usageError{fmt.Sprintf("%q is not %s id (a UUID)", s, what)}
	}
	return id, nil
}

// endpointJSON is an endpoint for -json, its timeout a duration string
// ("15s"; the embedded field's nanoseconds are shadowed).
type endpointJSON struct {
	*outbox.Endpoint
	Timeout string
}

func runOutboxEndpoints(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usageError{"want list, add, disable, enable, rotate-secret or reencrypt"}
	}
	sub, args := args[0], args[1:]
	fs := newFlagSet(e, "outbox endpoints "+sub, endpointsSynopsis[sub])
	switch sub {
	case "list":
		tenant := fs.String("tenant", "", "only this tenant's endpoints")
		limit := fs.Int("limit", 50, "at most this many endpoints per page, oldest first")
		after := fs.String("after", "", "the page after this cursor (printed after a full page)")
		asJSON := fs.Bool("json", false, "print JSON, one object per line")
		if _, err := parseInterleaved(fs, args); err != nil {
			return err
		}
		ob, err := e.outbox(ctx, false)
		if err != nil {
			return err
		}
		params := &outbox.EndpointListParams{Limit: *limit, After: *after}
		if *tenant != "" {
			params.Tenant = tenant
		}
		list, err := ob.EndpointList(ctx, params)
		if errors.Is(err, outbox.ErrInvalidCursor) {
			return usageError{"-after: not a cursor this command printed"}
		}
		if err != nil {
			return err
		}
		if len(list) > 0 && len(list) == *limit {
			defer fmt.Fprintf(e.errOut, "more: %s\n", nextPage(fs, outbox.EndpointCursor(list[len(list)-1])))
		}
		if *asJSON {
			enc := json.NewEncoder(e.out)
			for _, ep := range list {
				if err := enc.Encode(endpointJSON{Endpoint: ep, Timeout: ops.Duration(ep.Timeout)}); err != nil {
					return err
				}
			}
			return nil
		}
		tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tURL\tEVENTS\tTENANT\tENABLED\tCIRCUIT\tRATE LIMIT\tFAILURES\tLAST SUCCESS\tDISABLED REASON")
		for _, ep := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%s\t%s\t%d\t%s\t%s\n", ep.ID, oneLine(ep.URL, 60), strings.Join(ep.EventTypes, ","),
				ep.Tenant, ep.Enabled, formatCircuit(ep), formatRateLimit(ep.RateLimit), ep.ConsecutiveFailures,
				formatTime(ep.LastSuccessAt), oneLine(ep.DisabledReason, 40))
		}
		return tw.Flush()
	case "add":
		url := fs.String("url", "", "the endpoint's URL (required)")
		events := fs.String("events", "", "comma-separated event types (prefix.* and * allowed); none: every type")
		tenant := fs.String("tenant", "", "the tenant whose events it receives")
		description := fs.String("description", "", "a description")
		rate := fs.Float64("rate", 0, "rate limit: requests per second, shared by every worker (0: none)")
		burst := fs.Int("burst", 0, "with -rate: requests that may go at once (default 1)")
		maxInFlight := fs.Int("max-in-flight", 0, "requests in flight to it at once, 1 to 1000, -1 for no cap (default: the outbox's)")
		timeout := duration(fs, "timeout", 0, "the request timeout (default: the outbox's, 15s)")
		allowPrivate := fs.Bool("allow-private", false, "allow a private or loopback address (development)")
		if _, err := parseInterleaved(fs, args); err != nil {
			return err
		}
		if *url == "" {
			return usageError{"-url is required"}
		}
		if *burst != 0 && *rate == 0 {
			return usageError{"-burst needs -rate"}
		}
		ob, err := e.outbox(ctx, *allowPrivate)
		if err != nil {
			return err
		}
		params := &outbox.EndpointParams{URL: *url, Tenant: *tenant, Description: *description, MaxInFlight: *maxInFlight, Timeout: *timeout}
		if *rate != 0 {
			params.RateLimit = &outbox.RateLimit{PerSecond: *rate, Burst: *burst}
		}
		if *events != "" {
			params.EventTypes = strings.Split(*events, ",")
		}
		ep, err := ob.EndpointCreate(ctx, params)
		if blocked := (*outbox.BlockedAddressError)(nil); errors.As(err, &blocked) {
			return blockedURL(blocked)
		}
		if errors.Is(err, outbox.ErrInvalidEndpoint) {
			return usageError{err.Error()}
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(e.out, "endpoint %s created\n", ep.ID)
		// The operator asked for it: the receiver needs it to verify.
		fmt.Fprintf(e.out, "signing secret (give it to the receiver; `wharf` will not print it again): %s\n", ep.Secret)
		return nil
	case "disable", "enable", "rotate-secret":
		reason := fs.String("reason", "disabled by an operator", "disable: the reason recorded")
		recoverSince := duration(fs, "recover-since", 0, "enable: also create deliveries of events published in this past window while it was disabled")
		positional, err := parseInterleaved(fs, args)
		if err != nil {
			return err
		}
		if len(positional) != 1 {
			return usageError{fmt.Sprintf("outbox endpoints %s takes one endpoint id", sub)}
		}
		id, err := parseID("an endpoint", positional[0])
		if err != nil {
			return err
		}
		ob, err := e.outbox(ctx, false)
		if err != nil {
			return err
		}
		switch sub {
		case "disable":
			if _, err := ob.EndpointDisable(ctx, id, *reason); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "endpoint %s disabled; its pending deliveries are dead-lettered as they come up\n", id)
		case "enable":
			if _, err := ob.EndpointEnable(ctx, id); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "endpoint %s enabled; its circuit is closed\n", id)
			if *recoverSince > 0 {
				n, err := ob.EndpointRecover(ctx, id, time.Now().Add(-*recoverSince))
				if err != nil {
					return err
				}
				fmt.Fprintf(e.out, "recovered %d missed deliveries\n", n)
			}
		default:
			ep, err := ob.EndpointRotateSecret(ctx, id, nil)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.out, "endpoint %s has a new signing secret; both sign during the overlap\nnew secret (shown once): %s\n", id, ep.Secret)
		}
		return nil
	case "reencrypt":
		return runOutboxReencrypt(ctx, e, fs, args)
	}
	return usageError{fmt.Sprintf("unknown outbox endpoints command %q: want list, add, disable, enable, rotate-secret or reencrypt", sub)}
}

func runOutboxDeliveries(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usageError{"want list or show"}
	}
	sub, args := args[0], args[1:]
	fs := newFlagSet(e, "outbox deliveries "+sub, map[string]string{
		"list": "[-endpoint ID] [-status S] [-limit N] [-after CURSOR] [-json]", "show": "[-json] DELIVERY_ID",
	}[sub])
	asJSON := fs.Bool("json", false, "print JSON")
	switch sub {
	case "list":
		endpoint := fs.String("endpoint", "", "only this endpoint's deliveries")
		status := fs.String("status", "", "only this status: pending, retrying, succeeded or dead")
		limit := fs.Int("limit", 50, "at most this many deliveries per page, newest first")
		after := fs.String("after", "", "the page after this cursor (printed after a full page)")
		if _, err := parseInterleaved(fs, args); err != nil {
			return err
		}
		params := &outbox.DeliveryListParams{Status: outbox.DeliveryStatus(*status), Limit: *limit, After: *after}
		switch params.Status {
		case "", outbox.StatusPending, outbox.StatusRetrying, outbox.StatusSucceeded, outbox.StatusDead:
		default:
			return usageError{fmt.Sprintf("unknown status %q", *status)}
		}
		if *endpoint != "" {
			id, err := parseID("an endpoint", *endpoint)
			if err != nil {
				return err
			}
			params.EndpointID = &id
		}
		ob, err := e.outbox(ctx, false)
		if err != nil {
			return err
		}
		list, err := ob.DeliveryList(ctx, params)
		if errors.Is(err, outbox.ErrInvalidCursor) {
			return usageError{"-after: not a cursor this command printed"}
		}
		if err != nil {
			return err
		}
		lines, err := ops.DeliveryLines(ctx, dbsqlc.New(e.pool), list)
		if err != nil {
			return err
		}
		if len(list) > 0 && len(list) == *limit {
			defer fmt.Fprintf(e.errOut, "more: %s\n", nextPage(fs, outbox.DeliveryCursor(list[len(list)-1])))
		}
		if *asJSON {
			enc := json.NewEncoder(e.out)
			for _, l := range lines {
				if err := enc.Encode(l); err != nil {
					return err
				}
			}
			return nil
		}
		tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tEVENT\tTYPE\tENDPOINT\tSTATUS\tATTEMPTS\tNEXT ATTEMPT\tPUBLISHED\tLAST ERROR")
		for _, l := range lines {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", l.ID, l.EventID, orDash(l.EventType), oneLine(l.Endpoint, 50), l.Status,
				l.Attempts, formatNextAttempt(l), l.CreatedAt.Format(time.RFC3339), oneLine(l.LastError, 50))
		}
		return tw.Flush()
	case "show":
		positional, err := parseInterleaved(fs, args)
		if err != nil {
			return err
		}
		if len(positional) != 1 {
			return usageError{"outbox deliveries show takes one delivery id"}
		}
		id, err := parseID("a delivery", positional[0])
		if err != nil {
			return err
		}
		ob, err := e.outbox(ctx, false)
		if err != nil {
			return err
		}
		d, err := ob.DeliveryGet(ctx, id)
		if err != nil {
			return err
		}
		attempts, err := ob.AttemptList(ctx, id)
		if err != nil {
			return err
		}
		lines, err := ops.DeliveryLines(ctx, dbsqlc.New(e.pool), []*outbox.Delivery{d})
		if err != nil {
			return err
		}
		l := lines[0]
		if *asJSON {
			type attemptJSON struct {
				*outbox.Attempt
				Duration string // a duration string ("1.25s"), not nanoseconds
			}
			out := struct {
				*ops.DeliveryLine
				Attempts []attemptJSON `json:"attempt_log"`
			}{DeliveryLine: l}
			for _, a := range attempts {
				out.Attempts = append(out.Attempts, attemptJSON{Attempt: a, Duration: ops.Duration(a.Duration)})
			}
			return json.NewEncoder(e.out).Encode(out)
		}
		fmt.Fprintf(e.out, "id:           %s\nevent:        %s\ntype:         %s\nendpoint:     %s (%s)\nstatus:       %s\nattempts:     %d\nnext attempt: %s\npublished:    %s\n",
			d.ID, d.EventID, orDash(l.EventType), l.Endpoint, d.EndpointID, d.Status, d.Attempts, formatNextAttempt(l), d.CreatedAt.Format(time.RFC3339Nano))
		if d.LastError != "" {
			fmt.Fprintf(e.out, "last error:   %s\n", d.LastError)
		}
		tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\nATTEMPT\tAT\tSTATUS\tDURATION\tERROR / RESPONSE")
		for _, a := range attempts {
			code := "-"
			if a.StatusCode != nil {
				code = fmt.Sprint(*a.StatusCode)
			}
			detail := a.Error
			if detail == "" {
				detail = string(a.ResponseBody)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", a.Number, a.AttemptedAt.Format(time.RFC3339), code,
				ops.Duration(a.Duration), oneLine(detail, 60))
		}
		return tw.Flush()
	}
	return usageError{fmt.Sprintf("unknown outbox deliveries command %q: want list or show", sub)}
}

func runOutboxReplay(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "outbox replay", "DELIVERY_ID | -dead|-succeeded [-tenant T] [-endpoint ID] [-type PATTERN] [-codes 5xx] [-since 24h] [-until TIME] [-batch N] [-dry-run]")
	dead := fs.Bool("dead", false, "replay the dead deliveries the other flags select instead of one id")
	succeeded := fs.Bool("succeeded", false, "replay the succeeded deliveries the other flags select (send delivered events again)")
	tenant := fs.String("tenant", "", "by filter: the deliveries to this tenant's endpoints")
	endpoint := fs.String("endpoint", "", "by filter: one endpoint's deliveries")
	eventType := fs.String("type", "*", `by filter: the events' type: exact, "prefix.*" or "*"`)
	codes := fs.String("codes", "", "by filter: the last answer's status codes: 503, 500-599 or 5xx (default any, answered or not)")
	since := pointInTime(fs, "since", "24h", "by filter: deliveries of events published at or after this")
	until := pointInTime(fs, "until", "", "by filter: deliveries of events published before this (default now)")
	batch := fs.Int("batch", 500, "by filter: deliveries per transaction (and audit entry), 1–10000")
	dryRun := fs.Bool("dry-run", false, "by filter: count the deliveries, change nothing")
	positional, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if !*dead && !*succeeded {
		if len(positional) != 1 {
			return usageError{"outbox replay takes one delivery id, or -dead or -succeeded and filters"}
		}
		id, err := parseID("a delivery", positional[0])
		if err != nil {
			return err
		}
		ob, err := e.outbox(ctx, false)
		if err != nil {
			return err
		}
		if err := ob.DeliveryReplay(ctx, id); err != nil {
			return err
		}
		fmt.Fprintf(e.out, "delivery %s replayed\n", id)
		return nil
	}
	if *dead && *succeeded || len(positional) != 0 {
		return usageError{"outbox replay takes -dead or -succeeded with filters, and no delivery id"}
	}
	params := &outbox.RedriveParams{Status: outbox.StatusDead, EventType: *eventType, Since: since.at, Until: until.at, DryRun: *dryRun, BatchSize: *batch}
	if *succeeded {
		params.Status = outbox.StatusSucceeded
	}
	if *tenant != "" {
		params.Tenant = tenant
	}
	if *endpoint != "" {
		id, err := parseID("an endpoint", *endpoint)
		if err != nil {
			return err
		}
		params.EndpointID = &id
	}
	if params.MinStatusCode, params.MaxStatusCode, err = ops.ParseStatusCodes(*codes); err != nil {
		return usageError{"-codes: " + err.Error()}
	}
	if *batch < 1 {
		return usageError{fmt.Sprintf("-batch %d: want 1–10000", *batch)}
	}
	ob, err := e.outbox(ctx, false)
	if err != nil {
		return err
	}
	verb := "replayed"
	if *dryRun {
		verb = "would replay"
	}
	p := e.progress("matched %d, replayed %d, skipped %d…")
	res, err := ob.Redrive(ctx, params, func(r outbox.RedriveResult) { p.update(r.Matched, r.Replayed, r.Skipped) })
	p.done()
	if errors.Is(err, outbox.ErrInvalidRedrive) {
		return usageError{strings.TrimPrefix(err.Error(), "outbox: invalid redrive: ")}
	}
	if err != nil {
		if res != nil {
			return fmt.Errorf("after %d replayed in %d batch(es): %w", res.Replayed, res.Batches, err)
		}
		return err
	}
	if *dryRun {
		fmt.Fprintf(e.out, "%s %d %s deliveries; changed nothing\n", verb, res.Matched, params.Status)
		return nil
	}
	fmt.Fprintf(e.out, "%s %d %s deliveries in %d batch(es); skipped %d changed meanwhile\n", verb, res.Replayed, params.Status, res.Batches, res.Skipped)
	return nil
}

// formatCircuit describes an endpoint's circuit breaker: closed,
// "open until <time>" or half_open (probing).
func formatCircuit(ep *outbox.Endpoint) string {
	if ep.CircuitState == outbox.CircuitOpen && ep.CircuitOpenUntil != nil {
		return "open until " + ep.CircuitOpenUntil.Format(time.RFC3339)
	}
	return string(ep.CircuitState)
}

// formatRateLimit describes a rate limit, "-" for none.
func formatRateLimit(r *outbox.RateLimit) string {
	if r == nil {
		return "-"
	}
	return r.String()
}

func formatTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

// endpointsSynopsis is each `wharf outbox endpoints` command's synopsis.
var endpointsSynopsis = map[string]string{
	"list":          "[-tenant T] [-limit N] [-after CURSOR] [-json]",
	"add":           "-url URL [-events TYPES] [-tenant T] [-description D] [-rate R [-burst N]] [-max-in-flight N] [-timeout D] [-allow-private]",
	"disable":       "[-reason R] ENDPOINT_ID",
	"enable":        "[-recover-since D] ENDPOINT_ID",
	"rotate-secret": "ENDPOINT_ID",
	"reencrypt":     "",
}

// blockedURL is the answer to an endpoint URL the outbox's SSRF guard
// refuses, naming the flag that allows it when there is one.
func blockedURL(b *outbox.BlockedAddressError) error {
	if b.Private {
		return usageError{fmt.Sprintf("-url resolves to %s (%s): pass -allow-private to allow private and loopback addresses (a development setup)", b.Addr, b.Reason)}
	}
	return usageError{fmt.Sprintf("-url resolves to %s (%s), which deliveries may not reach", b.Addr, b.Reason)}
}

// formatNextAttempt says when a delivery's next attempt may go, and when
// its endpoint's circuit holds it.
func formatNextAttempt(l *ops.DeliveryLine) string {
	at := formatTime(l.NextAttempt)
	switch {
	case !l.HeldByCircuit:
		return at
	case l.NextAttempt == nil:
		return "held by open circuit"
	}
	return at + " (held by open circuit)"
}

// orDash is s, or "-" when s is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
