package idempotency_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/idempotency"
	"github.com/wharfhq/wharf/internal/testdb"
)

func TestTransactionalHandlerWritesAndKeyAreAtomic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	transactional := idempotency.Config{Transactional: true}

	t.Run("CommitTogether", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testOptions{config: transactional})
		res := b.do(t, payoutOf("key-1"))
		require.Equal(t, http.StatusCreated, res.status)

		var status string
		var responseStatus int
		var balance int64
		require.NoError(t, b.pool.QueryRow(ctx, `
			SELECT k.status, k.response_status, b.balance
			FROM wharf_idempotency_keys k, balances b
			WHERE k.idempotency_key = 'key-1' AND b.account = 'acct_1'`).Scan(&status, &responseStatus, &balance))
		require.Equal(t, "completed", status)
		require.Equal(t, http.StatusCreated, responseStatus)
		require.EqualValues(t, 90, balance)
	})

	t.Run("HandlerCommitKeepsWrites", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testOptions{
			config: transactional,
			handler: func(b *testBundle) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					// The usual pgx pattern works unchanged.
					tx := idempotency.Tx(r.Context())
					defer func() { _ = tx.Rollback(r.Context()) }()
					in, balance, err := b.debit(r)
					if err == nil {
						err = tx.Commit(r.Context())
					}
					if err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
					b.created(w, in.Account, balance)
				}
			},
		})
		res := b.do(t, payoutOf("key-1"))
		require.Equal(t, http.StatusCreated, res.status, res.body)
		require.EqualValues(t, 90, b.balance(t, "acct_1"))
		require.Equal(t, "completed", b.keyStatus(t, "key-1"))
	})

	t.Run("HandlerRollbackUndoesWritesAndKeepsItsAnswer", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testOptions{
			config: transactional,
			handler: func(b *testBundle) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					_, balance, err := b.debit(r)
					if err == nil && balance < 95 {
						err = idempotency.Tx(r.Context()).Rollback(r.Context())
						if err == nil {
							w.Header().Set("Content-Type", "application/json")
							w.WriteHeader(http.StatusUnprocessableEntity)
							_, _ = w.Write([]byte(`{"error":"insufficient funds"}`))
							return
						}
					}
					http.Error(w, fmt.Sprint("unexpected: ", balance, err), http.StatusInternalServerError)
				}
			},
		})
		first := b.do(t, payoutOf("key-1"))
		require.Equal(t, http.StatusUnprocessableEntity, first.status, first.body)
		require.EqualValues(t, 100, b.balance(t, "acct_1"))
		require.Equal(t, "completed", b.keyStatus(t, "key-1"))

		again := b.do(t, payoutOf("key-1"))
		require.True(t, again.replayed())
		require.Equal(t, first.body, again.body)
		require.EqualValues(t, 1, b.calls.Load())
	})

	t.Run("CancelledContextAfterWriteRollsBack", func(t *testing.T) {
		t.Parallel()
		written, served := newGate(), make(chan struct{}, 4)
		b := setup(t, testOptions{
			config: transactional,
			gates:  []*gate{written},
			served: func() { served <- struct{}{} },
			handler: func(b *testBundle) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					in, balance, err := b.debit(r)
					if err == nil && b.calls.Load() == 1 {
						written.open()
						<-r.Context().Done() // the client has gone
						// The rest of the work fails with the request's context.
						_, err = b.db(r).Exec(r.Context(), "UPDATE balances SET balance = balance WHERE account = $1", in.Account)
						if err == nil {
							err = errors.New("statement ran on a cancelled context")
						}
					}
					if err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
					b.created(w, in.Account, balance)
				}
			},
		})

		reqCtx, cancel := context.WithCancel(ctx)
		req := payoutOf("key-1")
		req.ctx = reqCtx
		sent := make(chan error, 1)
		go func() {
			_, err := b.send(req)
			sent <- err
		}()
		written.wait()
		cancel()
		require.ErrorIs(t, <-sent, context.Canceled)
		<-served // the middleware has settled the request

		require.EqualValues(t, 100, b.balance(t, "acct_1"), "the write must roll back")
		require.Empty(t, b.keyStatus(t, "key-1"), "the claim must roll back")

		res := b.do(t, payoutOf("key-1"))
		<-served
		require.Equal(t, http.StatusCreated, res.status, res.body)
		require.False(t, res.replayed())
		require.EqualValues(t, 90, b.balance(t, "acct_1"))
		require.EqualValues(t, 2, b.calls.Load())
	})

	t.Run("HandlerLeavingTxFailedIs500", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testOptions{
			config: transactional,
			handler: func(b *testBundle) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					in, balance, ok := b.debitOrFail(w, r)
					if !ok {
						return
					}
					// A failed statement whose error the handler ignores.
					_, _ = b.db(r).Exec(r.Context(), "SELECT 1/0")
					b.created(w, in.Account, balance)
				}
			},
		})
		res := b.do(t, payoutOf("key-1"))
		require.Equal(t, http.StatusInternalServerError, res.status)
		require.Contains(t, res.errorMessage(t), "left its transaction failed")
		require.EqualValues(t, 100, b.balance(t, "acct_1"))
		require.Empty(t, b.keyStatus(t, "key-1"))
	})
}

// Environment of TestCrashChild.
const (
	crashURLEnv  = "WHARF_IDEMPOTENCY_CRASH_URL"
	crashModeEnv = "WHARF_IDEMPOTENCY_CRASH_TRANSACTIONAL"
)

func TestKilledProcessMidHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	modes(t, func(t *testing.T, transactional bool) {
		b := setup(t, testOptions{config: idempotency.Config{Transactional: transactional}})
		backendPID := killChildInHandler(t, b.url, transactional)

		if transactional {
			require.NotZero(t, backendPID)
			// Postgres ends the dead client's transaction when it notices the
			// connection dropped; await that, then nothing of it may remain.
			require.Eventually(t, func() bool {
				var n int
				err := b.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", backendPID).Scan(&n)
				return err == nil && n == 0
			}, 30*time.Second, 10*time.Millisecond)
			require.EqualValues(t, 100, b.balance(t, "acct_1"), "the killed handler's write must not persist")
			require.Zero(t, b.keyCount(t), "the killed request's claim must not persist")

			res := b.do(t, payoutOf("crash-key"))
			require.Equal(t, http.StatusCreated, res.status, res.body)
			require.False(t, res.replayed())
			require.EqualValues(t, 90, b.balance(t, "acct_1"))
		} else {
			// The claim committed before the handler ran, and so did the
			// handler's own write: the key is stuck in progress.
			require.Equal(t, "in_progress", b.keyStatus(t, "crash-key"))
			require.EqualValues(t, 90, b.balance(t, "acct_1"))
			res := b.do(t, payoutOf("crash-key"))
			require.Equal(t, http.StatusConflict, res.status, res.body)

			// After InProgressTimeout a retry takes the key over. The write
			// happens twice: the limit of non-transactional mode.
			b.age(t, "crash-key", idempotency.DefaultInProgressTimeout)
			res = b.do(t, payoutOf("crash-key"))
			require.Equal(t, http.StatusCreated, res.status, res.body)
			require.False(t, res.replayed())
			require.EqualValues(t, 80, b.balance(t, "acct_1"))
			require.Contains(t, b.logs.String(), "taking over a key left in progress")
		}
		require.Equal(t, "completed", b.keyStatus(t, "crash-key"))
		require.EqualValues(t, 1, b.calls.Load())
		require.True(t, b.do(t, payoutOf("crash-key")).replayed())
	})
}

// killChildInHandler runs TestCrashChild in a child process against the
// database at url, SIGKILLs it once its handler has written, and returns the
// Postgres backend pid of the child's transaction (0 when not transactional).
func killChildInHandler(t *testing.T, url string, transactional bool) uint32 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashURLEnv+"="+url, crashModeEnv+"="+strconv.FormatBool(transactional))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr testdb.LockedBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())

	var pid uint32
	var seen strings.Builder
	lines := bufio.NewScanner(stdout)
	ready := false
	for !ready && lines.Scan() {
		_, err := fmt.Sscanf(lines.Text(), "ready %d", &pid)
		ready = err == nil
		seen.WriteString(lines.Text() + "\n")
	}
	if !ready {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child never reached its handler\nstdout:\n%s\nstderr:\n%s", seen.String(), stderr.String())
	}
	require.NoError(t, cmd.Process.Kill())
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	status, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok && status.Signaled() && status.Signal() == syscall.SIGKILL, "child ended by %v", err)
	return pid
}

// TestCrashChild is not a test of its own: TestKilledProcessMidHandler runs
// the test binary again with only this function, which serves one request
// whose handler writes, reports, and waits to be killed.
func TestCrashChild(t *testing.T) {
	t.Parallel()
	url := os.Getenv(crashURLEnv)
	if url == "" {
		t.Skip("runs only as the child process of TestKilledProcessMidHandler")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	mw, err := idempotency.New(pool, accountPrincipal, &idempotency.Config{Transactional: os.Getenv(crashModeEnv) == "true"})
	require.NoError(t, err)
	child := &testBundle{pool: pool}

	mux := http.NewServeMux()
	mux.Handle("POST /payouts", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, err := child.debit(r); err != nil {
			fmt.Println("debit failed:", err)
			return
		}
		pid := uint32(0)
		if tx := idempotency.Tx(r.Context()); tx != nil {
			pid = tx.Conn().PgConn().PID()
		}
		fmt.Printf("ready %d\n", pid)
		_, _ = io.Copy(io.Discard, os.Stdin) // returns when the parent gives up on us
	})))
	req := payoutOf("crash-key")
	hr := httptest.NewRequest(http.MethodPost, "/payouts", strings.NewReader(req.body))
	hr.Header.Set("X-Account", req.account)
	hr.Header.Set(idempotency.HeaderKey, req.keys[0])
	mux.ServeHTTP(httptest.NewRecorder(), hr)
	t.Error("the handler returned: the parent should have killed this process")
}
