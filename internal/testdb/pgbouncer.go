package testdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Modes are pgx's query exec modes that work through PgBouncer in
// transaction mode before version 1.21 (which added prepared statements):
// neither prepares a named statement on a server connection the next
// statement may not get.
var Modes = []string{"exec", "simple_protocol"}

// EachMode runs test as parallel subtests on a fresh database: one
// straight to Postgres ("direct"), then one through PgBouncer in
// transaction mode for each of Modes.
func EachMode(t *testing.T, test func(t *testing.T, pool *pgxpool.Pool)) {
	t.Helper()
	for _, mode := range append([]string{"direct"}, Modes...) {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			if mode == "direct" {
				test(t, New(t))
				return
			}
			pool, _ := NewPooled(t, mode)
			test(t, pool)
		})
	}
}

// PgBouncer is a PgBouncer in transaction pool mode, started for one test
// in front of the test server.
type PgBouncer struct {
	target *neturl.URL
	addr   string
	cmd    *exec.Cmd
	log    *LockedBuffer
	exited chan struct{}
}

// pgbouncerInstall is what a test says when PgBouncer is missing.
const pgbouncerInstall = "install it: `apt-get install pgbouncer` on Debian or Ubuntu (.ci/run does), " +
	"or put a pgbouncer binary on PATH"

// NewPgBouncer starts PgBouncer in transaction pool mode in front of the
// server and database of databaseURL (from NewURL) and stops it when the
// test ends, before the database is dropped. A missing pgbouncer binary
// fails the test and says how to install one: these tests never skip.
//
// PgBouncer refuses to run as root: as root it runs as the user postgres.
func NewPgBouncer(tb testing.TB, databaseURL string) *PgBouncer {
	tb.Helper()
	bin := requirePgBouncer(tb, pgbouncerPath)
	target, err := neturl.Parse(databaseURL)
	if err != nil {
		tb.Fatalf("testdb: parse URL: %v", err)
	}
	pc, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		tb.Fatalf("testdb: parse %s: %v", redact(databaseURL), err)
	}
	runAs, err := pgbouncerUser()
	if err != nil {
		tb.Fatalf("testdb: %v", err)
	}

	var lastErr error
	for range 5 { // the free port may be taken between picking and binding it
		b, err := startPgBouncer(bin, target, pc, runAs)
		if err == nil {
			tb.Cleanup(func() {
				b.stop()
				if tb.Failed() {
					tb.Logf("testdb: pgbouncer log:\n%s", b.log.String())
				}
			})
			return b
		}
		lastErr = err
	}
	tb.Fatalf("testdb: start pgbouncer: %v", lastErr)
	return nil
}

// NewPooled returns a pool on a fresh test database through its own
// PgBouncer in transaction mode, with pgx in mode ("exec" or
// "simple_protocol"), and the pool's URL. The pool is closed when the test
// ends.
func NewPooled(tb testing.TB, mode string) (*pgxpool.Pool, string) {
	tb.Helper()
	url := NewPgBouncer(tb, NewURL(tb)).URL(mode)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		tb.Fatalf("testdb: pool through PgBouncer: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool, url
}

// URL returns the test database's URL through PgBouncer with pgx's
// default_query_exec_mode set to mode ("exec" or "simple_protocol").
func (b *PgBouncer) URL(mode string) string {
	u := *b.target
	u.Host = b.addr
	q := u.Query()
	q.Set("default_query_exec_mode", mode)
	u.RawQuery = q.Encode()
	return u.String()
}

func startPgBouncer(bin string, target *neturl.URL, pc *pgx.ConnConfig, runAs *user.User) (*PgBouncer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	parent := ""
	if runAs != nil {
		// The user PgBouncer runs as must reach the file: $TMPDIR may be
		// private to root, /tmp is not.
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, "wharf-pgbouncer-")
	if err != nil {
		return nil, err
	}
	// Every client logs in to the server as the test database's user
	// (auth_type any): the test's URLs carry the same credentials anyway.
	// The password stays in a file only PgBouncer's user can read.
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%d user=%s password=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 20
reserve_pool_size = 0
server_idle_timeout = 10
ignore_startup_parameters = extra_float_digits
log_connections = 0
log_disconnections = 0
`, pc.Host, pc.Port, iniValue(pc.User), iniValue(pc.Password), port)
	cfgPath := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(cfgPath, []byte(ini), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(bin, cfgPath)
	// Dies with the test binary, even a killed one.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if runAs != nil {
		uid, _ := strconv.ParseUint(runAs.Uid, 10, 32)
		gid, _ := strconv.ParseUint(runAs.Gid, 10, 32)
		for _, p := range []string{dir, cfgPath} {
			if err := os.Chown(p, int(uid), int(gid)); err != nil {
				_ = os.RemoveAll(dir)
				return nil, err
			}
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	log := &LockedBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	b := &PgBouncer{target: target, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, log: log, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
		close(b.exited)
	}()
	if err := b.awaitReady(); err != nil {
		b.stop()
		return nil, fmt.Errorf("%w\npgbouncer log:\n%s", err, log.String())
	}
	// PgBouncer has read its config (it rereads it only when told to): the
	// file, which holds a password, need not outlive a test binary that is
	// killed before its cleanup runs.
	_ = os.RemoveAll(dir)
	return b, nil
}

// awaitReady waits until a query answers through PgBouncer, or PgBouncer
// exits, or 30 seconds pass.
func (b *PgBouncer) awaitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := pingURL(ctx, b.URL("simple_protocol"))
		if err == nil {
			return nil
		}
		select {
		case <-b.exited:
			return fmt.Errorf("pgbouncer exited: %s", b.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("pgbouncer did not answer on %s: %w", b.addr, err)
		case <-tick.C:
		}
	}
}

func pingURL(ctx context.Context, url string) error {
	attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(attempt, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(attempt, "SELECT 1")
	return err
}

// stop shuts PgBouncer down at once (SIGTERM: server connections closed,
// so the test database can be dropped) and waits for it to exit.
func (b *PgBouncer) stop() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
}

// requirePgBouncer returns the pgbouncer binary that path finds, or fails
// the test saying how to install one.
func requirePgBouncer(tb fataler, path func() (string, error)) string {
	tb.Helper()
	bin, err := path()
	if err != nil {
		tb.Fatalf("testdb: %v; %s", err, pgbouncerInstall)
	}
	return bin
}

func pgbouncerPath() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	// Debian installs it in /usr/sbin, which a non-root PATH may lack.
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", errors.New("pgbouncer not found (not on PATH, not /usr/sbin/pgbouncer)")
}

// pgbouncerUser is the user PgBouncer runs as: nil for the current one,
// postgres when the tests run as root (PgBouncer refuses root).
func pgbouncerUser() (*user.User, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer refuses to run as root and there is no user postgres to run it as (%v): "+
			"run the tests as another user, or create one (Debian's postgresql package does)", err)
	}
	return u, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// iniValue quotes a connection-string value for PgBouncer's [databases].
func iniValue(s string) string {
	var b bytes.Buffer
	b.WriteByte('\'')
	for _, r := range s {
		if r == '\'' || r == '\\' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('\'')
	return b.String()
}

// LockedBuffer is an io.Writer that goroutines (a process's copiers, a
// server's handlers, River's) and the test may share: PgBouncer's log, a
// slog handler's output.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
