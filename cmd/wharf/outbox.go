package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/wharfhq/wharf/outbox"
)

// parseInterleaved parses fs's flags wherever they stand among args and
// returns the positional arguments: `replay ID -queue q` and
// `replay -queue q ID` mean the same.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageError{err.Error()}
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func runOutbox(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usageError{"want endpoints, deliveries or replay"}
	}
	switch args[0] {
	case "endpoints":
		return runOutboxEndpoints(ctx, e, args[1:])
	case "deliveries":
		return runOutboxDeliveries(ctx, e, args[1:])
	case "replay":
		return runOutboxReplay(ctx, e, args[1:])
	}
	return usageError{fmt.Sprintf("unknown outbox command %q: want endpoints, deliveries or replay", args[0])}
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
	return outbox.New(pool, &outbox.Config{AllowPrivateNetworks: allowPrivate, SecretKeys: keys})
}

func parseID(what, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, usageError{fmt.Sprintf("%q is not %s id (a UUID)", s, what)}
	}
	return id, nil
}

// endpointJSON is an endpoint for -json, its timeout a Go duration string
// (the embedded field's nanoseconds are shadowed).
type endpointJSON struct {
	*outbox.Endpoint
	Timeout string
}

func runOutboxEndpoints(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usageError{"want list, add, disable, enable, rotate-secret or reencrypt"}
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("outbox endpoints "+sub, flag.ContinueOnError)
	fs.SetOutput(e.errOut)
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
			defer fmt.Fprintf(e.errOut, "more: wharf outbox endpoints list -after %s\n", outbox.EndpointCursor(list[len(list)-1]))
		}
		if *asJSON {
			enc := json.NewEncoder(e.out)
			for _, ep := range list {
				if err := enc.Encode(endpointJSON{Endpoint: ep, Timeout: ep.Timeout.String()}); err != nil {
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
		params := &outbox.EndpointParams{URL: *url, Tenant: *tenant, Description: *description}
		if *rate != 0 {
			params.RateLimit = &outbox.RateLimit{PerSecond: *rate, Burst: *burst}
		}
		if *events != "" {
			params.EventTypes = strings.Split(*events, ",")
		}
		ep, err := ob.EndpointCreate(ctx, params)
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
		recoverSince := fs.Duration("recover-since", 0, "enable: also create deliveries of events published in this past window while it was disabled (e.g. 24h)")
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
	fs := flag.NewFlagSet("outbox deliveries "+sub, flag.ContinueOnError)
	fs.SetOutput(e.errOut)
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
		if len(list) > 0 && len(list) == *limit {
			defer fmt.Fprintf(e.errOut, "more: wharf outbox deliveries list -after %s\n", outbox.DeliveryCursor(list[len(list)-1]))
		}
		if *asJSON {
			enc := json.NewEncoder(e.out)
			for _, d := range list {
				if err := enc.Encode(d); err != nil {
					return err
				}
			}
			return nil
		}
		tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tEVENT\tENDPOINT\tSTATUS\tATTEMPTS\tPUBLISHED\tLAST ERROR")
		for _, d := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", d.ID, d.EventID, d.EndpointID, d.Status, d.Attempts,
				d.CreatedAt.Format(time.RFC3339), oneLine(d.LastError, 50))
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
		if *asJSON {
			type attemptJSON struct {
				*outbox.Attempt
				Duration string // a Go duration string, not nanoseconds
			}
			out := struct {
				*outbox.Delivery
				Attempts []attemptJSON `json:"attempt_log"`
			}{Delivery: d}
			for _, a := range attempts {
				out.Attempts = append(out.Attempts, attemptJSON{Attempt: a, Duration: a.Duration.String()})
			}
			return json.NewEncoder(e.out).Encode(out)
		}
		fmt.Fprintf(e.out, "id:        %s\nevent:     %s\nendpoint:  %s\nstatus:    %s\nattempts:  %d\npublished: %s\n",
			d.ID, d.EventID, d.EndpointID, d.Status, d.Attempts, d.CreatedAt.Format(time.RFC3339Nano))
		if d.LastError != "" {
			fmt.Fprintf(e.out, "last error: %s\n", d.LastError)
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
				a.Duration.Round(time.Millisecond), oneLine(detail, 60))
		}
		return tw.Flush()
	}
	return usageError{fmt.Sprintf("unknown outbox deliveries command %q: want list or show", sub)}
}

func runOutboxReplay(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("outbox replay", flag.ContinueOnError)
	fs.SetOutput(e.errOut)
	dead := fs.Bool("dead", false, "replay every dead delivery of -endpoint (since -since) instead of one id")
	endpoint := fs.String("endpoint", "", "with -dead: the endpoint")
	since := fs.Duration("since", 24*time.Hour, "with -dead: deliveries that died within this past window")
	positional, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	ob, err := e.outbox(ctx, false)
	if err != nil {
		return err
	}
	if *dead {
		if len(positional) != 0 || *endpoint == "" {
			return usageError{"outbox replay -dead takes -endpoint ID and no delivery id"}
		}
		id, err := parseID("an endpoint", *endpoint)
		if err != nil {
			return err
		}
		n, err := ob.DeliveryReplayDead(ctx, id, time.Now().Add(-*since))
		if err != nil {
			return err
		}
		fmt.Fprintf(e.out, "replayed %d dead deliveries\n", n)
		return nil
	}
	if len(positional) != 1 {
		return usageError{"outbox replay takes one delivery id, or -dead -endpoint ID"}
	}
	id, err := parseID("a delivery", positional[0])
	if err != nil {
		return err
	}
	if err := ob.DeliveryReplay(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "delivery %s replayed\n", id)
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
