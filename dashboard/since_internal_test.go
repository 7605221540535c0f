package dashboard

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                     {},
		"90m":                  now.Add(-90 * time.Minute),
		"24h":                  now.Add(-24 * time.Hour),
		"7d":                   now.Add(-7 * 24 * time.Hour),
		"1d12h":                now.Add(-36 * time.Hour),
		" 2026-11-01 ":         time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		"2026-11-20T10:00:00Z": time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC),
	} {
		got, err := parseSince(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"yesterday", "-5h", "-1d", "99999d", "1e9h", "2026-13-01", "7 d"} {
		if _, err := parseSince(in, now); err == nil {
			t.Errorf("parseSince(%q): no error", in)
		}
	}
}

// since comes from the query string: any input is an answer or a clear
// error, never a panic, and an answer is never in the future.
func FuzzParseSince(f *testing.F) {
	for _, s := range []string{"", "24h", "7d", "2026-11-01", "2026-11-20T10:00:00Z", "-1h", "\xff", "9999999999999999999d"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseSince(s, now)
		if err != nil {
			if !utf8.ValidString(err.Error()) {
				t.Fatalf("error is not valid UTF-8: %q", err)
			}
			return
		}
		if got.IsZero() && strings.TrimSpace(s) != "" {
			t.Fatalf("parseSince(%q) = zero time without error: only blank input means no bound", s)
		}
		if got.After(now) && !strings.Contains(s, "-") {
			t.Fatalf("parseSince(%q) = %v, after now", s, got)
		}
	})
}

func TestShowBodyAndRedaction(t *testing.T) {
	if body, kind := showBody([]byte{0xff, 0x00, 0xfe, 0x01}); kind != "binary" || body != "(4 bytes of binary data)" {
		t.Errorf("binary body shown as %q (%s)", body, kind)
	}
	if body, kind := showBody([]byte(`{"a":1}`)); kind != "JSON" || body != "{\n  \"a\": 1\n}" {
		t.Errorf("JSON body shown as %q (%s)", body, kind)
	}
	// Deep nesting would multiply the size of an indented page: shown as
	// the raw text instead.
	deep := []byte(strings.Repeat("[", 20000) + strings.Repeat("]", 20000))
	if body, kind := showBody(deep); kind != "text" || len(body) != len(deep) {
		t.Errorf("deeply nested JSON shown as %s, %d bytes", kind, len(body))
	}
	if d := jsonDepth([]byte(`{"a":"[[[[","b":[{"c":"\"{"}]}`)); d != 3 {
		t.Errorf("jsonDepth = %d, want 3 (brackets in strings do not count)", d)
	}
	big := make([]byte, maxBodyShown+10)
	for i := range big {
		big[i] = 'x'
	}
	if body, kind := showBody(big); kind != "text" || len(body) > maxBodyShown+64 {
		t.Errorf("a long body is not cut: %d bytes (%s)", len(body), kind)
	}
	hs := redactHeaders(map[string][]string{"Stripe-Signature": {"t=1,v1=abc"}, "X-Hub-Signature-256": {"sha256=x"},
		"Paypal-Transmission-Sig": {"x"}, "Plaid-Verification": {"jwt"}, "Ocp-Apim-Subscription-Key": {"k"},
		"Authorization": {"Bearer x"}, "X-Api-Key": {"k"}, "Content-Type": {"application/json"}})
	for _, h := range hs {
		if (h.Name == "Content-Type") == h.Redacted {
			t.Errorf("%s redacted=%v", h.Name, h.Redacted)
		}
		if h.Redacted && h.Value != "[redacted]" {
			t.Errorf("%s shown as %q", h.Name, h.Value)
		}
	}
}
