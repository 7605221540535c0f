package snippets_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// markdownLink matches an inline link or image, [text](target) or
// ![alt](target), whose text may run over lines; an optional "title" after
// the target is left out of it.
var markdownLink = regexp.MustCompile(`!?\[([^\]]*)\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// prose returns the lines of a Markdown page outside fenced code blocks,
// with the code blocks' lines left empty so that line numbers hold.
func prose(src string) []string {
	lines := strings.Split(src, "\n")
	out := make([]string, len(lines))
	fence := ""
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
		case fence != "" && strings.HasPrefix(trimmed, fence):
			fence = ""
		case fence == "":
			out[i] = line
		}
	}
	return out
}

// anchors returns the anchors GitHub gives the headings of a Markdown
// page: the heading's text in lower case, without punctuation, spaces
// turned into hyphens, "-1", "-2"… added to repeats.
func anchors(src string) map[string]bool {
	found := map[string]bool{}
	seen := map[string]int{}
	for _, line := range prose(src) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		if text == "" || !strings.HasPrefix(strings.TrimLeft(line, "#"), " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsNumber(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		anchor := b.String()
		if n := seen[anchor]; n > 0 {
			seen[anchor] = n + 1
			anchor = fmt.Sprintf("%s-%d", anchor, n)
		} else {
			seen[anchor] = 1
		}
		found[anchor] = true
	}
	return found
}

// pageLink is a relative link found on a page.
type pageLink struct {
	Line   int // from 1
	Target string
}

// relativeLinks returns the links of a Markdown page that lead within the
// repository: no scheme (https:, mailto:), not in code.
func relativeLinks(src string) []pageLink {
	text := blankCodeSpans(strings.Join(prose(src), "\n"))
	var links []pageLink
	for _, m := range markdownLink.FindAllStringSubmatchIndex(text, -1) {
		target := text[m[4]:m[5]]
		if strings.Contains(target, ":") && !strings.HasPrefix(target, "#") {
			continue // https://…, mailto:…
		}
		links = append(links, pageLink{Line: strings.Count(text[:m[0]], "\n") + 1, Target: target})
	}
	return links
}

// blankCodeSpans returns text with its code spans (a run of n backticks,
// then anything up to the next run of exactly n) blanked, newlines kept,
// so that what they hold is no link and offsets keep their line.
func blankCodeSpans(text string) string {
	b := []byte(text)
	run := func(i int) int { // the length of the backtick run at i
		n := 0
		for i+n < len(b) && b[i+n] == '`' {
			n++
		}
		return n
	}
	for i := 0; i < len(b); {
		n := run(i)
		if n == 0 {
			i++
			continue
		}
		end := -1
		for j := i + n; j < len(b); {
			if m := run(j); m > 0 {
				if m == n {
					end = j + m
					break
				}
				j += m
				continue
			}
			j++
		}
		if end < 0 { // no closing run: the backticks are text
			i += n
			continue
		}
		for k := i; k < end; k++ {
			if b[k] != '\n' {
				b[k] = ' '
			}
		}
		i = end
	}
	return string(b)
}

// Every relative link of the README and of docs/*.md leads to a file or
// directory of the repository, and every #anchor to a heading of its page.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	anchorsOf := map[string]map[string]bool{} // by page, relative to repoRoot
	pageAnchors := func(page string) (map[string]bool, error) {
		if a, ok := anchorsOf[page]; ok {
			return a, nil
		}
		src, err := os.ReadFile(filepath.Join(repoRoot, page))
		if err != nil {
			return nil, err
		}
		anchorsOf[page] = anchors(string(src))
		return anchorsOf[page], nil
	}
	checked := 0
	for _, page := range docPages(t) {
		src, err := os.ReadFile(filepath.Join(repoRoot, page))
		require.NoError(t, err)
		for _, link := range relativeLinks(string(src)) {
			checked++
			where := fmt.Sprintf("%s:%d: link %q", page, link.Line, link.Target)
			path, fragment, _ := strings.Cut(link.Target, "#")
			target := page
			if path != "" {
				target = filepath.Clean(filepath.Join(filepath.Dir(page), path))
				if strings.HasPrefix(target, "..") {
					t.Errorf("%s leads out of the repository", where)
					continue
				}
				if _, err := os.Stat(filepath.Join(repoRoot, target)); err != nil {
					t.Errorf("%s: no such file or directory: %s", where, target)
					continue
				}
			}
			if fragment == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s: an anchor into %s, which is not a Markdown page", where, target)
				continue
			}
			a, err := pageAnchors(target)
			require.NoError(t, err)
			if !a[fragment] {
				t.Errorf("%s: %s has no heading whose anchor is #%s", where, target, fragment)
			}
		}
	}
	require.NotZero(t, checked, "no relative link found: the link parser is broken")
}

// The anchors and links the checks rely on are found as GitHub renders
// them.
func TestDocLinksParser(t *testing.T) {
	t.Parallel()
	page := "# Wharf\n\n## Quick start: the inbox\n\n### Dashboard and `wharf stats`\n\n" +
		"## The other benchmarks, 2026-11-26 to 2026-11-28\n\n## Setup\n\n## Setup\n\n" +
		"```sh\n# not a heading [no](link.md)\n```\n\n" +
		"See [a\npage](docs/inbox.md#processing), ![chart](bench-curve.svg), " +
		"`[code](not-a-link.md)`, ```` ``[also](code.md)`` ````, [site](https://example.com) and [here](#setup-1).\n"
	require.Equal(t, map[string]bool{
		"wharf": true, "quick-start-the-inbox": true, "dashboard-and-wharf-stats": true,
		"the-other-benchmarks-2026-11-26-to-2026-11-28": true, "setup": true, "setup-1": true,
	}, anchors(page))
	require.Equal(t, []pageLink{
		{Line: 17, Target: "docs/inbox.md#processing"},
		{Line: 18, Target: "bench-curve.svg"},
		{Line: 18, Target: "#setup-1"},
	}, relativeLinks(page))
}
