package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/wharfhq/wharf/inbox"
)

// maxBodyShown caps the bytes of a body a page shows.
const maxBodyShown = 64 << 10

// maxJSONDepth is the deepest JSON a page indents: past it, indenting
// (a line and its indent per level) would multiply the body's size.
const maxJSONDepth = 32

// maxReplayPerRequest caps the messages one "replay all" request replays,
// so that it ends within a request's time; the page says when more may
// match.
const maxReplayPerRequest = 1000

// checkFilterText refuses filter values that cannot be stored text
// (invalid UTF-8, NUL): they match nothing, and Postgres would refuse them.
func checkFilterText(values ...string) error {
	for _, v := range values {
		if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 || len(v) > 1024 {
			return badRequest{"A filter holds bytes that are not text, or is over 1024 bytes long."}
		}
	}
	return nil
}

// inboxFilter is the query string of /inbox, a stable URL shape.
type inboxFilter struct {
	Status, Source, Type, Since, Q, After string
}

func inboxFilterOf(v url.Values) inboxFilter {
	return inboxFilter{Status: v.Get("status"), Source: v.Get("source"), Type: v.Get("type"),
		Since: v.Get("since"), Q: strings.TrimSpace(v.Get("q")), After: v.Get("after")}
}

// params checks the filter and turns it into list parameters.
func (h *Handler) inboxParams(f inboxFilter) (*inbox.ListParams, error) {
	switch inbox.Status(f.Status) {
	case "", inbox.StatusReceived, inbox.StatusProcessed, inbox.StatusFailed, inbox.StatusDead:
	default:
		return nil, badRequest{fmt.Sprintf("status %q is not one of received, processed, failed or dead", ellipsis(f.Status, 40))}
	}
	if err := checkFilterText(f.Source, f.Type, f.Q); err != nil {
		return nil, err
	}
	since, err := parseSince(f.Since, h.now())
	if err != nil {
		return nil, err
	}
	return &inbox.ListParams{OmitBody: true, Status: inbox.Status(f.Status), Source: f.Source, EventType: f.Type,
		EventID: f.Q, Since: since, After: f.After, Limit: h.cfg.PageSize}, nil
}

func (h *Handler) inboxList(w http.ResponseWriter, r *http.Request) {
	f := inboxFilterOf(r.URL.Query())
	data := map[string]any{"Title": "Inbox", "Filter": f}
	sources, err := h.queries.InboxMessageSources(r.Context())
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The inbox could not be read.", err)
		return
	}
	data["Sources"] = sources
	params, err := h.inboxParams(f)
	var bad badRequest
	if errors.As(err, &bad) {
		data["Error"] = bad.msg
		h.render(w, r, http.StatusBadRequest, "inbox", data)
		return
	}
	msgs, err := h.inbox.List(r.Context(), params)
	switch {
	case errors.Is(err, inbox.ErrInvalidCursor):
		data["Error"] = "The page link is broken: start from the first page."
		h.render(w, r, http.StatusBadRequest, "inbox", data)
		return
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, "The inbox could not be read.", err)
		return
	}
	data["Messages"] = msgs
	if len(msgs) == params.Limit {
		next := f
		next.After = inbox.Cursor(msgs[len(msgs)-1])
		data["Next"] = next
	}
	data["Replayable"] = f.Status == string(inbox.StatusDead) || f.Status == string(inbox.StatusFailed)
	h.render(w, r, http.StatusOK, "inbox", data)
}

func (h *Handler) inboxMessage(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.fail(w, r, http.StatusNotFound, "No such message: the id is not a UUID.", nil)
		return
	}
	m, err := h.inbox.Get(r.Context(), id)
	switch {
	case errors.Is(err, inbox.ErrNotFound):
		h.fail(w, r, http.StatusNotFound, "No such message: it may have been dropped by retention.", nil)
		return
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, "The message could not be read.", err)
		return
	}
	body, kind := showBody(m.Body)
	h.render(w, r, http.StatusOK, "message", map[string]any{
		"Title":      "Message " + m.EventID,
		"M":          m,
		"Headers":    redactHeaders(m.Header),
		"Body":       body,
		"BodyKind":   kind,
		"Replayable": m.Status == inbox.StatusDead || m.Status == inbox.StatusFailed,
		"Skippable":  m.Status == inbox.StatusReceived || m.Status == inbox.StatusFailed,
		"Done":       doneMessage(r.URL.Query()),
	})
}

func (h *Handler) inboxReplay(r *http.Request) (string, error) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return "", inbox.ErrNotFound
	}
	switch err := h.inbox.Replay(r.Context(), id); {
	case errors.Is(err, inbox.ErrNotReplayable):
		return "", badRequest{"This message cannot be replayed now: it is processed, erased, or its job is still queued."}
	case err != nil:
		return "", err
	}
	return "/inbox/" + id.String() + "?done=replayed", nil
}

func (h *Handler) inboxSkip(r *http.Request) (string, error) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return "", inbox.ErrNotFound
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if reason == "" {
		reason = "skipped from the dashboard"
	}
	switch err := h.inbox.Skip(r.Context(), id, ellipsis(reason, 500)); {
	case errors.Is(err, inbox.ErrNotSkippable):
		return "", badRequest{"This message is finished: there is nothing to skip."}
	case err != nil:
		return "", err
	}
	return "/inbox/" + id.String() + "?done=skipped", nil
}

// inboxReplayMatching replays every dead or failed message the posted
// filter matches.
func (h *Handler) inboxReplayMatching(r *http.Request) (string, error) {
	f := inboxFilterOf(r.PostForm)
	f.After = ""
	params, err := h.inboxParams(f)
	if err != nil {
		return "", err
	}
	if params.Status != inbox.StatusDead && params.Status != inbox.StatusFailed {
		return "", badRequest{"Replay all takes a status filter of dead or failed."}
	}
	params.Limit = 100
	replayed, skipped, err := h.inbox.ReplayMatching(r.Context(), params, maxReplayPerRequest, nil)
	if err != nil {
		return "", fmt.Errorf("after %d replayed: %w", replayed, err)
	}
	q := url.Values{"status": {f.Status}, "done": {"replayed-all"},
		"n": {fmt.Sprint(replayed)}, "skipped": {fmt.Sprint(skipped)}}
	if replayed+skipped >= maxReplayPerRequest {
		q.Set("more", "1")
	}
	for k, v := range map[string]string{"source": f.Source, "type": f.Type, "since": f.Since, "q": f.Q} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return "/inbox?" + q.Encode(), nil
}

// doneMessage is the line shown after an action redirected back: fixed
// texts chosen by the done parameter, never the parameter itself.
func doneMessage(q url.Values) string {
	switch q.Get("done") {
	case "replayed":
		return "Replayed: a job will process the message again."
	case "skipped":
		return "Skipped: the message is dead and later messages of its ordering key go on."
	case "replayed-all":
		var n, skipped int
		_, _ = fmt.Sscan(q.Get("n"), &n)
		_, _ = fmt.Sscan(q.Get("skipped"), &skipped)
		msg := fmt.Sprintf("Replayed %d message(s); %d could no longer be replayed.", n, skipped)
		if q.Get("more") != "" {
			msg += fmt.Sprintf(" One request replays at most %d: more may match, replay again.", maxReplayPerRequest)
		}
		return msg
	case "enabled":
		return "Endpoint enabled."
	case "disabled":
		return "Endpoint disabled: it gets no new deliveries."
	case "rotated":
		return "Secret rotated: the previous secret keeps signing during the overlap. The new secret is not shown here; the application reads it with Outbox.EndpointSecret."
	case "replayed-dead":
		var n int
		_, _ = fmt.Sscan(q.Get("n"), &n)
		return fmt.Sprintf("Replayed %d dead deliveries.", n)
	case "redriven", "redrive-counted":
		var n, matched, skipped int
		_, _ = fmt.Sscan(q.Get("n"), &n)
		_, _ = fmt.Sscan(q.Get("matched"), &matched)
		_, _ = fmt.Sscan(q.Get("skipped"), &skipped)
		if q.Get("done") == "redrive-counted" {
			return fmt.Sprintf("Dry run: %d deliveries match; nothing was changed.", matched)
		}
		return fmt.Sprintf("Replayed %d of %d matching deliveries; %d changed meanwhile and were skipped.", n, matched, skipped)
	}
	return ""
}

// header is one header line as a page shows it.
type header struct {
	Name, Value string
	Redacted    bool
}

// secretHeaderWords mark a header whose value is a credential or a
// signature (which, with the body, could be replayed to the receiver).
var secretHeaderWords = []string{"authorization", "cookie", "sig", "hmac", "token", "secret", "password", "key", "auth", "verification", "credential"}

// redactHeaders lists h sorted by name, credential and signature values
// replaced.
func redactHeaders(h http.Header) []header {
	var out []header
	for name, values := range h {
		lower := strings.ToLower(name)
		secret := false
		for _, w := range secretHeaderWords {
			secret = secret || strings.Contains(lower, w)
		}
		for _, v := range values {
			if secret {
				v = "[redacted]"
			}
			out = append(out, header{Name: name, Value: v, Redacted: secret})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// showBody returns a body as a page shows it: JSON indented, other text
// as is, anything else described; cut at maxBodyShown.
func showBody(b []byte) (string, string) {
	cut := ""
	if len(b) > maxBodyShown {
		cut = fmt.Sprintf("\n… (%d more bytes not shown)", len(b)-maxBodyShown)
	}
	var pretty bytes.Buffer
	if len(b) <= maxBodyShown && jsonDepth(b) <= maxJSONDepth && json.Indent(&pretty, b, "", "  ") == nil {
		return pretty.String(), "JSON"
	}
	shown := b[:min(len(b), maxBodyShown)]
	if utf8.Valid(shown) || utf8.Valid(shown[:max(len(shown)-3, 0)]) {
		return strings.ToValidUTF8(string(shown), "\uFFFD") + cut, "text"
	}
	return fmt.Sprintf("(%d bytes of binary data)", len(b)), "binary"
}

// jsonDepth is the deepest nesting of arrays and objects in b, outside
// strings (b need not be valid JSON).
func jsonDepth(b []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString && c == '"':
			inString = false
		case inString:
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}
