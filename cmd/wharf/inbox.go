package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/wharfhq/wharf/inbox"
)

func runInbox(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usageError{"want list, show, replay, forget or rescue"}
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "list":
		fs := newFlagSet(e, "inbox list", "[-source S] [-status S] [-limit N] [-after CURSOR] [-json]")
		source := fs.String("source", "", "only this source")
		status := fs.String("status", "", "only this status: received, processed, failed or dead")
		limit := fs.Int("limit", 50, "at most this many messages per page, newest first")
		after := fs.String("after", "", "the page after this cursor (printed after a full page)")
		asJSON := fs.Bool("json", false, "print JSON, one message per line (without body and headers)")
		if _, err := parseInterleaved(fs, args); err != nil {
			return err
		}
		switch inbox.Status(*status) {
		case "", inbox.StatusReceived, inbox.StatusProcessed, inbox.StatusFailed, inbox.StatusDead:
		default:
			return usageError{fmt.Sprintf("unknown status %q", *status)}
		}
		ib, err := e.inbox(ctx, "")
		if err != nil {
			return err
		}
		msgs, err := ib.List(ctx, &inbox.ListParams{Source: *source, Status: inbox.Status(*status), Limit: *limit, After: *after})
		if errors.Is(err, inbox.ErrInvalidCursor) {
			return usageError{"-after: not a cursor this command printed"}
		}
		if err != nil {
			return err
		}
		if len(msgs) > 0 && len(msgs) == *limit {
			defer fmt.Fprintf(e.errOut, "more: %s\n", nextPage(fs, inbox.Cursor(msgs[len(msgs)-1])))
		}
		if *asJSON {
			enc := json.NewEncoder(e.out)
			for _, m := range msgs {
				row := map[string]any{
					"id": m.ID, "received_at": m.ReceivedAt, "source": m.Source, "event_id": m.EventID,
					"event_type": m.EventType, "status": m.Status, "attempts": m.Attempts, "last_error": m.LastError,
					"processed_at": m.ProcessedAt, "ordering_key": m.OrderingKey,
				}
				if m.RedeliveryOf != nil {
					row["redelivery_of"] = m.RedeliveryOf.MessageID
				}
				if err := enc.Encode(row); err != nil {
					return err
				}
			}
			return nil
		}
		tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tRECEIVED\tSOURCE\tEVENT ID\tTYPE\tSTATUS\tATTEMPTS\tLAST ERROR")
		for _, m := range msgs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", m.ID, m.ReceivedAt.Format(time.RFC3339),
				m.Source, m.EventID, m.EventType, m.Status, m.Attempts, oneLine(m.LastError, 60))
		}
		return tw.Flush()
	case "show", "replay":
		fs := newFlagSet(e, "inbox "+sub, "[flags] MESSAGE_ID")
		queue := fs.String("queue", inbox.DefaultQueue, "replay: the River queue for the new job when the old job is gone (else the old job's queue is used)")
		status := fs.String("status", "", "replay every message in this status (dead or failed) instead of one id")
		source := fs.String("source", "", "with -status: only this source")
		since := duration(fs, "since", 24*time.Hour, "with -status: only messages received within this past window")
		args, err := parseInterleaved(fs, args)
		if err != nil {
			return err
		}
		if sub == "replay" && *status != "" {
			if len(args) != 0 {
				return usageError{"inbox replay -status takes no message id"}
			}
			return replayMatching(ctx, e, *queue, inbox.Status(*status), *source, *since)
		}
		if len(args) != 1 {
			return usageError{fmt.Sprintf("inbox %s takes one message id, or (replay) -status", sub)}
		}
		id, err := uuid.Parse(args[0])
		if err != nil {
			return usageError{fmt.Sprintf("%q is not a message id (a UUID)", args[0])}
		}
		ib, err := e.inbox(ctx, *queue)
		if err != nil {
			return err
		}
		if sub == "replay" {
			if err := ib.Replay(ctx, id); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "message %s re-enqueued\n", id)
			return nil
		}
		m, err := ib.Get(ctx, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.out, "id:          %s\nsource:      %s\nevent id:    %s\ntype:        %s\nstatus:      %s\nattempts:    %d\nreceived at: %s\n",
			m.ID, m.Source, m.EventID, m.EventType, m.Status, m.Attempts, m.ReceivedAt.Format(time.RFC3339Nano))
		if m.ProcessedAt != nil {
			fmt.Fprintf(e.out, "processed:   %s\n", m.ProcessedAt.Format(time.RFC3339Nano))
		}
		if m.LastError != "" {
			fmt.Fprintf(e.out, "last error:  %s\n", m.LastError)
		}
		if r := m.RedeliveryOf; r != nil {
			first := "not processed, or no longer stored"
			if r.ProcessedAt != nil {
				first = "processed " + r.ProcessedAt.Format(time.RFC3339Nano)
			}
			fmt.Fprintf(e.out, "late arrival: of %s (%s); policy %s\n", r.MessageID, first, r.Policy)
		}
		fmt.Fprintf(e.out, "body:        %d bytes\n%s\n", len(m.Body), m.Body)
		return nil
	case "forget":
		fs := newFlagSet(e, "inbox forget", "SOURCE EVENT_ID")
		args, err := parseInterleaved(fs, args)
		if err != nil {
			return err
		}
		if len(args) != 2 {
			return usageError{"inbox forget takes a source and an event id"}
		}
		ib, err := e.inbox(ctx, "")
		if err != nil {
			return err
		}
		n, err := ib.Forget(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(e.out, "erased the body and headers of %d message(s); the dedupe key stays\n", n)
		return nil
	case "rescue":
		fs := newFlagSet(e, "inbox rescue", "[-queue Q]")
		queue := fs.String("queue", inbox.DefaultQueue, "the River queue for the new jobs: the inbox's (inbox.Config.Queue)")
		args, err := parseInterleaved(fs, args)
		if err != nil {
			return err
		}
		if len(args) != 0 {
			return usageError{"inbox rescue takes no arguments"}
		}
		ib, err := e.inbox(ctx, *queue)
		if err != nil {
			return err
		}
		n, err := ib.Rescue(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.out, "rescued %d stranded message(s) onto new jobs in queue %q\n", n, *queue)
		return nil
	default:
		return usageError{fmt.Sprintf("unknown inbox command %q: want list, show, replay, forget or rescue", sub)}
	}
}

func (e *env) inbox(ctx context.Context, queue string) (*inbox.Inbox, error) {
	pool, err := e.connect(ctx)
	if err != nil {
		return nil, err
	}
	return inbox.New(pool, &inbox.Config{Queue: queue, Logger: e.libraryLogger()})
}

// oneLine shortens s to one line of at most n runes for a table cell.
func oneLine(s string, n int) string {
	r := []rune(s)
	for i, c := range r {
		if c == '\n' || c == '\r' {
			r = r[:i]
			break
		}
	}
	if len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return string(r)
}

// replayMatching replays every message in status (dead or failed) of
// source received within since, newest first, its counts growing on a
// terminal. A message that cannot be replayed any more (processed
// meanwhile, erased) is counted and skipped.
func replayMatching(ctx context.Context, e *env, queue string, status inbox.Status, source string, since time.Duration) error {
	if status != inbox.StatusDead && status != inbox.StatusFailed {
		return usageError{fmt.Sprintf("-status %q: replay by filter takes dead or failed", status)}
	}
	ib, err := e.inbox(ctx, queue)
	if err != nil {
		return err
	}
	params := &inbox.ListParams{Status: status, Source: source, Since: time.Now().Add(-since)}
	p := e.progress("replayed %d, skipped %d…")
	replayed, skipped, err := ib.ReplayMatching(ctx, params, 0, func(replayed, skipped int) { p.update(replayed, skipped) })
	p.done()
	if err != nil {
		return fmt.Errorf("after %d replayed: %w", replayed, err)
	}
	fmt.Fprintf(e.out, "replayed %d %s message(s); skipped %d no longer replayable\n", replayed, status, skipped)
	return nil
}
