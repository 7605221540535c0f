package shared

import (
	"net/url"
	"strings"
)

// RedactURL shows where a URL points without what may be a credential in
// it: user info, query and every path segment after the first are masked
// (a Slack or Discord webhook URL carries its secret in the path), and the
// first too unless it is a plain word (a Telegram bot's token, or a
// receiver's random path, is the first).
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(unparsable URL)"
	}
	out := u.Scheme + "://"
	if u.User != nil {
		out += "xxxxx@"
	}
	out += u.Host
	segments := strings.Split(strings.TrimPrefix(u.EscapedPath(), "/"), "/")
	switch {
	case segments[0] == "":
	case plainWord(segments[0]):
		out += "/" + segments[0]
		if len(segments) > 1 {
			out += "/…"
		}
	default:
		out += "/…"
	}
	if u.RawQuery != "" {
		out += "?…"
	}
	return out
}

// plainWord reports whether a path segment reads as a word rather than a
// token: at most 24 letters, dashes, underscores or dots, and no digit.
func plainWord(s string) bool {
	if len(s) > 24 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}
