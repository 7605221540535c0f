package chaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// pgCluster is a throwaway Postgres server of the test's own, so that the
// long form can restart Postgres without disturbing the shared server that
// other tests (and other people's test runs) use.
type pgCluster struct {
	bin  string // the server's bin directory
	dir  string // data directory
	port int
	asPG bool // run pg_ctl as the postgres user (the test runs as root)
}

// startPrivateCluster creates and starts a cluster from the newest server
// binaries under /usr/lib/postgresql, stopped and removed when the test
// ends. It returns nil and the reason when that is not possible.
func startPrivateCluster(t testing.TB) (*pgCluster, string) {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(bins) == 0 {
		return nil, "no server binaries under /usr/lib/postgresql"
	}
	sort.Slice(bins, func(i, j int) bool { return versionOf(bins[i]) < versionOf(bins[j]) })
	c := &pgCluster{bin: filepath.Dir(bins[len(bins)-1]), asPG: os.Geteuid() == 0}
	dir, err := os.MkdirTemp("", "wharf-chaos-pg-")
	if err != nil {
		return nil, err.Error()
	}
	c.dir = dir
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if c.asPG {
		// initdb refuses to run as root.
		pg, err := user.Lookup("postgres")
		if err != nil {
			return nil, "running as root without a postgres user"
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err.Error()
		}
	}
	if out, err := c.run("initdb", "-D", dir, "-U", "postgres", "--auth=trust", "-E", "UTF8"); err != nil {
		return nil, fmt.Sprintf("initdb: %v: %s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err.Error()
	}
	c.port = ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off", c.port, dir)
	if out, err := c.run("pg_ctl", "-D", dir, "-l", filepath.Join(dir, "server.log"), "-w", "-o", opts, "start"); err != nil {
		return nil, fmt.Sprintf("pg_ctl start: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = c.run("pg_ctl", "-D", dir, "-m", "immediate", "-w", "stop") })
	return c, ""
}

func versionOf(pgCtl string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(pgCtl))))
	return v
}

func (c *pgCluster) run(name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path := filepath.Join(c.bin, name)
	if c.asPG {
		args = append([]string{"-u", "postgres", "--", path}, args...)
		path = "runuser"
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.WaitDelay = 5 * time.Second // a daemon holding our pipe must not hang the test
	return cmd.CombinedOutput()
}

func (c *pgCluster) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// newDatabase creates an empty database (the example migrates it) and
// returns its URL.
func (c *pgCluster) newDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.url("postgres"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE wharf_chaos")
	require.NoError(t, err)
	return c.url("wharf_chaos")
}

// restart restarts the server (fast shutdown: sessions are terminated,
// transactions in flight roll back) and waits until it accepts
// connections again.
func (c *pgCluster) restart(t testing.TB) {
	t.Helper()
	// -l again: without it the new postmaster writes to pg_ctl's output,
	// our pipe, and the command never returns.
	out, err := c.run("pg_ctl", "-D", c.dir, "-l", filepath.Join(c.dir, "server.log"), "-m", "fast", "-w", "restart")
	require.NoError(t, err, "pg_ctl restart: %s", out)
}
