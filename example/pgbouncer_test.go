package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/signature"
)

// TestExampleThroughPgBouncer is the example run as a user would behind
// PgBouncer in transaction mode (DATABASE_URL through the pooler with
// pgx's exec or simple_protocol mode, WHARF_EXAMPLE_MIGRATE_URL direct):
// a duplicate storm of payments is applied exactly once per event, each
// balance change publishes a webhook that is delivered, and a payout
// retried with its Idempotency-Key is applied once. Without a direct
// migration URL the example refuses to start, at once, and says what to
// set.
func TestExampleThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range testdb.Modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			directURL := testdb.NewURL(t)
			pooledURL := testdb.NewPgBouncer(t, directURL).URL(mode)

			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = run(ctx, config{DatabaseURL: pooledURL, Secret: DevSecret}, ln, slog.New(slog.NewTextHandler(io.Discard, nil)))
			require.ErrorIs(t, err, wharf.ErrPooledConnection)
			require.Contains(t, err.Error(), "WHARF_EXAMPLE_MIGRATE_URL")
			require.NoError(t, ctx.Err(), "refused at once")

			var mu sync.Mutex
			delivered := map[string]int{} // webhook-id → requests
			sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				delivered[r.Header.Get(signature.HeaderWebhookID)]++
				mu.Unlock()
				w.WriteHeader(http.StatusNoContent)
			}))
			t.Cleanup(sink.Close)
			base, _ := startExampleDB(t, config{DatabaseURL: pooledURL, MigrateURL: directURL, AllowPrivate: true})
			status, endpoint, _ := sendJSON(t, base+"/endpoints", nil, `{"url":"`+sink.URL+`","event_types":["balance.updated"]}`)
			require.Equal(t, http.StatusCreated, status, endpoint)

			const payments, copies = 20, 5
			type send struct{ id, body string }
			var sends []send
			for c := range copies {
				for p := range payments {
					sends = append(sends, send{fmt.Sprintf("msg_%d", p), fmt.Sprintf(
						`{"type":"payment.succeeded","data":{"account":"acct_%d","amount":%d},"copy":%d}`, p%4, p+1, c%2)})
				}
			}
			statuses := make([]int, len(sends))
			var wg sync.WaitGroup
			for i, s := range sends {
				wg.Go(func() {
					h, err := signature.SignStandardWebhooks([]string{DevSecret}, s.id, time.Now(), []byte(s.body))
					if err == nil {
						statuses[i], _, _ = sendJSON(t, base+"/webhooks/payments", h, s.body)
					}
				})
			}
			wg.Wait()
			for i, status := range statuses {
				require.Equal(t, http.StatusOK, status, sends[i].id)
			}

			// acct_k receives the amounts p+1 of the payments p with p%4 == k.
			want := map[string]float64{}
			for p := range payments {
				want[fmt.Sprintf("acct_%d", p%4)] += float64(p + 1)
			}
			balance := func(account string) float64 {
				resp, err := http.Get(base + "/balances/" + account)
				require.NoError(t, err)
				defer resp.Body.Close()
				var body map[string]any
				require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
				return body["balance"].(float64)
			}
			require.Eventually(t, func() bool {
				for account, amount := range want {
					if balance(account) != amount {
						return false
					}
				}
				return true
			}, 30*time.Second, 20*time.Millisecond, "each payment applied once")
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(delivered) == payments
			}, 30*time.Second, 20*time.Millisecond, "one balance.updated per payment")

			payout := func() (int, map[string]any) {
				h := http.Header{}
				h.Set("Idempotency-Key", "pooled-payout")
				status, body, _ := sendJSON(t, base+"/payouts", h, `{"account":"acct_0","amount":10}`)
				return status, body
			}
			status, first := payout()
			require.Equal(t, http.StatusCreated, status, first)
			status, again := payout()
			require.Equal(t, http.StatusCreated, status)
			require.Equal(t, first, again)
			require.Equal(t, want["acct_0"]-10, balance("acct_0"))
		})
	}
}
