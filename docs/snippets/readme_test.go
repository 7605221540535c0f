package snippets_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/signature"
)

// repoRoot is the library's root directory, where README.md and go.mod are.
const repoRoot = "../.."

// docPages are the pages whose ```go blocks must be regions of this
// package's code, relative to repoRoot: the README and every docs/*.md.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages, "no docs/*.md pages")
	out := []string{"README.md"}
	for _, p := range pages {
		rel, err := filepath.Rel(repoRoot, p)
		require.NoError(t, err)
		out = append(out, rel)
	}
	return out
}

// codeBlock is one ```go block of a page.
type codeBlock struct {
	Page string // relative to repoRoot
	Line int    // of its first line of code, from 1
	Text string
}

func (b codeBlock) where() string { return fmt.Sprintf("%s:%d", b.Page, b.Line) }

// goBlocks returns the ```go blocks of page (relative to repoRoot).
func goBlocks(t *testing.T, page string) []codeBlock {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, page))
	require.NoError(t, err)
	var blocks []codeBlock
	var current *codeBlock
	var lines []string
	for i, line := range strings.Split(string(src), "\n") {
		switch {
		case current == nil && line == "```go":
			current = &codeBlock{Page: page, Line: i + 2}
			lines = nil
		case current != nil && line == "```":
			current.Text = strings.Join(lines, "\n")
			blocks = append(blocks, *current)
			current = nil
		case current != nil:
			lines = append(lines, line)
		}
	}
	if current != nil {
		t.Fatalf("%s: the ```go block is never closed", current.where())
	}
	return blocks
}

// allGoBlocks returns the ```go blocks of every page of docPages.
func allGoBlocks(t *testing.T) []codeBlock {
	t.Helper()
	var blocks []codeBlock
	for _, page := range docPages(t) {
		blocks = append(blocks, goBlocks(t, page)...)
	}
	require.NotEmpty(t, blocks, "no page has a ```go block")
	return blocks
}

// region is code a page's block must equal: a marked region of a snippet
// file, or a whole file without markers.
type region struct {
	Where string // file:line, for messages
	Text  string
}

// snippetRegions returns the regions of the package's files and its
// subdirectories' (test files aside).
func snippetRegions(t *testing.T) []region {
	t.Helper()
	var regions []region
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || path == "doc.go" {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		path = filepath.Join("docs/snippets", path) // as messages name it
		found, err := markedRegions(path, string(src))
		if err != nil {
			return err
		}
		if found == nil { // a whole file, the quick start
			found = []region{{Where: path + ":1", Text: strings.TrimSuffix(string(src), "\n")}}
		}
		regions = append(regions, found...)
		return nil
	})
	require.NoError(t, err)
	return regions
}

// markedRegions returns the regions between "// readme:begin NAME" and
// "// readme:end" in src, each less its common indentation.
func markedRegions(path, src string) ([]region, error) {
	var regions []region
	var start int
	var body []string
	for i, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "// readme:begin"):
			if body != nil {
				return nil, fmt.Errorf("%s:%d: readme:begin inside the region of line %d", path, i+1, start)
			}
			start, body = i+1, []string{}
		case trimmed == "// readme:end":
			if body == nil {
				return nil, fmt.Errorf("%s:%d: readme:end without readme:begin", path, i+1)
			}
			regions = append(regions, region{Where: fmt.Sprintf("%s:%d", path, start), Text: dedent(body)})
			body = nil
		case body != nil:
			body = append(body, line)
		}
	}
	if body != nil {
		return nil, fmt.Errorf("%s:%d: readme:begin never ended", path, start)
	}
	return regions, nil
}

// dedent removes the tabs that every non-empty line starts with.
func dedent(lines []string) string {
	common := -1
	for _, l := range lines {
		if l == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, "\t")); common < 0 || n < common {
			common = n
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		if l != "" {
			out[i] = l[common:]
		}
	}
	return strings.Join(out, "\n")
}

// firstDifference describes where a and b first differ, by line.
func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if i >= len(al) || i >= len(bl) || x != y {
			return fmt.Sprintf("line %d of the block:\n  page:    %q\n  snippet: %q", i+1, x, y)
		}
	}
	return "no difference"
}

// commonPrefixLines counts the leading lines a and b share.
func commonPrefixLines(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	n := 0
	for n < len(al) && n < len(bl) && al[n] == bl[n] {
		n++
	}
	return n
}

// Every ```go block of the README and of docs/*.md is, character for
// character, a region of this package's code, which the build compiles and
// `make lint` vets and gofmt-checks; and every region is in some page.
func TestDocSnippets(t *testing.T) {
	t.Parallel()
	regions := snippetRegions(t)
	used := make([]bool, len(regions))
	for _, b := range allGoBlocks(t) {
		match, nearest := -1, -1
		for i, r := range regions {
			if !used[i] && r.Text == b.Text {
				match = i
				break
			}
			if nearest < 0 || commonPrefixLines(r.Text, b.Text) > commonPrefixLines(regions[nearest].Text, b.Text) {
				nearest = i
			}
		}
		if match >= 0 {
			used[match] = true
			continue
		}
		hint := "no region is like it: add one to docs/snippets"
		if nearest >= 0 {
			hint = fmt.Sprintf("nearest region %s differs at %s", regions[nearest].Where, firstDifference(b.Text, regions[nearest].Text))
		}
		t.Errorf("%s: the ```go block is no region of docs/snippets; %s", b.where(), hint)
	}
	for i, r := range regions {
		if !used[i] {
			t.Errorf("%s: region is in no ```go block of README.md or docs/*.md: copy it there, or delete it", r.Where)
		}
	}
}

// The README's inbox quick start, copied as it is into a fresh module,
// builds and runs on a database that holds nothing of the app's: it
// migrates, creates its own table, receives signed webhooks (accepted, then
// a duplicate), applies two payments to an account that had no row, each
// once, and exits cleanly on SIGINT. The fresh module's graph holds none of
// the interop module's libraries.
func TestQuickStart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	started := time.Now()

	var program string
	for _, b := range goBlocks(t, "README.md") {
		if strings.HasPrefix(b.Text, "package main\n") {
			require.Empty(t, program, "%s: a second ```go block that is a program; TestQuickStart expects one", b.where())
			program = b.Text + "\n"
		}
	}
	require.NotEmpty(t, program, "README.md: no ```go block starts with \"package main\": the inbox quick start must be a whole program")

	root, err := filepath.Abs(repoRoot)
	require.NoError(t, err)
	dir := t.TempDir()
	gomod := fmt.Sprintf("module quickstart\n\ngo 1.26.0\n\nrequire github.com/wharfhq/wharf v0.0.0\n\nreplace github.com/wharfhq/wharf => %s\n", root)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644))

	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go command must be on PATH (go test puts GOROOT/bin there)")
	runGo := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, goTool, args...)
		cmd.Dir = dir
		// -mod=mod lets tidy fill go.sum; GOWORK=off keeps any workspace out.
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s in the fresh module:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	runGo("mod", "tidy")
	for _, m := range strings.Fields(runGo("list", "-m", "all")) {
		require.NotContains(t, m, "stripe-go", "an importer inherits a test-only dependency; it belongs in interop/go.mod")
		require.NotContains(t, m, "standard-webhooks", "an importer inherits a test-only dependency; it belongs in interop/go.mod")
	}
	runGo("build", "-o", "quickstart", ".")
	t.Logf("tidy and build took %s", time.Since(started).Round(time.Millisecond))

	// A database with nothing of the app's: the quick start must create
	// what its handler writes to.
	databaseURL := testdb.NewURL(t)
	pool, err := pgxpool.New(ctx, databaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var appTables int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = 'balances'`).Scan(&appTables))
	require.Zero(t, appTables, "the test database already holds the app's table")

	secret, err := signature.GenerateStandardSecret()
	require.NoError(t, err)
	addr := freeAddr(t)
	logPath := filepath.Join(dir, "quickstart.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	defer logFile.Close()
	appOutput := func() string {
		out, _ := os.ReadFile(logPath)
		return string(out)
	}
	app := exec.Command(filepath.Join(dir, "quickstart"))
	app.Env = append(os.Environ(), "DATABASE_URL="+databaseURL, "PAYMENTS_SECRET="+secret, "ADDR="+addr)
	app.Stdout, app.Stderr = logFile, logFile
	require.NoError(t, app.Start())
	var exitErr error
	exited := make(chan struct{})
	go func() { exitErr = app.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = app.Process.Kill() // when a failure left it running
		<-exited
	})

	// Up when it answers; a process that exits first fails with its output.
	listening := eventually(30*time.Second, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
	select {
	case <-exited:
		t.Fatalf("the quick start exited (%v); its output:\n%s", exitErr, appOutput())
	default:
	}
	require.True(t, listening, "the quick start never listened on %s; its output:\n%s", addr, appOutput())

	send := func(id string, body []byte) map[string]string {
		t.Helper()
		header, err := signature.SignStandardWebhooks([]string{secret}, id, time.Now(), body)
		require.NoError(t, err)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/webhooks/payments", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header = header
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		answer, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "answer %s; the quick start's output:\n%s", answer, appOutput())
		var fields map[string]string
		require.NoError(t, json.Unmarshal(answer, &fields), "answer %s", answer)
		return fields
	}
	// Two payments to an account that has no row yet, the first sent
	// twice: the first creates the row, the second adds to it, the
	// duplicate changes nothing.
	first := []byte(`{"type":"payment.succeeded","data":{"account":"acct_1","amount":125}}`)
	answer := send("evt_1", first)
	require.Equal(t, "accepted", answer["status"])
	require.Equal(t, "evt_1", answer["event_id"])
	answer = send("evt_1", first)
	require.Equal(t, "duplicate", answer["status"])
	require.Equal(t, "evt_1", answer["event_id"])
	answer = send("evt_2", []byte(`{"type":"payment.succeeded","data":{"account":"acct_1","amount":75}}`))
	require.Equal(t, "accepted", answer["status"])

	var balance int64
	var queryErr error
	applied := eventually(30*time.Second, func() bool {
		queryErr = pool.QueryRow(ctx, `SELECT balance FROM balances WHERE account = 'acct_1'`).Scan(&balance)
		return queryErr == nil && balance == 200
	})
	require.True(t, applied, "balance %d (%v): the handler never applied both payments, once each; the quick start's output:\n%s",
		balance, queryErr, appOutput())
	http.DefaultClient.CloseIdleConnections()

	require.NoError(t, app.Process.Signal(os.Interrupt))
	select {
	case <-exited:
		require.NoError(t, exitErr, "the quick start did not exit cleanly on SIGINT; its output:\n%s", appOutput())
	case <-time.After(30 * time.Second):
		t.Fatalf("the quick start was still running 30 s after SIGINT; its output:\n%s", appOutput())
	}
	t.Logf("the quick start's output:\n%s", appOutput())
	t.Logf("the quick start compiled and ran in %s", time.Since(started).Round(time.Millisecond))
}

// freeAddr returns a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// eventually polls cond until it holds or d has passed, and says whether it
// held. Unlike require.Eventually, the caller's failure message is built
// after the wait, so it can show what the program printed meanwhile.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
