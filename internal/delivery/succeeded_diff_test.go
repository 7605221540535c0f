package delivery

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/admission"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/pgxtx"
)

// TestRecordSucceededMatchesPerAttempt records the same successes once with
// OutboxAttemptRecordSucceeded (recordMany) and once with one
// OutboxAttemptRecord per attempt (recordBatch), each in a fresh database,
// and compares what they leave behind and return (each delivery at its own
// attempt's time: one time for all was found by review). Two differences
// are by design: the endpoint's last_success_at, when written, is the
// latest success's time (per attempt: the first's, after which the row is
// fresh), and the circuit's closing is reported even when the attempt that
// would have reported it was superseded.
func TestRecordSucceededMatchesPerAttempt(t *testing.T) {
	t.Parallel()
	type scenario struct {
		name   string
		setup  string // $1 endpoint, $2 t0, $3 delivery ids (uuid[])
		slots  []int32
		mutate func(ps []*dbsqlc.OutboxAttemptRecordParams)
	}
	scenarios := []scenario{
		{name: "fresh", setup: `UPDATE wharf_outbox_endpoints SET last_success_at = $2 WHERE id = $1 AND $3::uuid[] IS NOT NULL`},
		{name: "stale", setup: `UPDATE wharf_outbox_endpoints SET last_success_at = $2::timestamptz - interval '1 hour' WHERE id = $1 AND $3::uuid[] IS NOT NULL`},
		{name: "open", setup: `UPDATE wharf_outbox_endpoints SET consecutive_failures = 5, failing_since = $2::timestamptz - interval '1 hour',
			last_failure_at = $2, circuit_state = 'open', circuit_opened_at = $2, circuit_open_until = $2, circuit_openings = 2 WHERE id = $1 AND $3::uuid[] IS NOT NULL`},
		{name: "half-open", setup: `UPDATE wharf_outbox_endpoints SET consecutive_failures = 5, failing_since = $2::timestamptz - interval '1 hour',
			circuit_state = 'half_open', circuit_opened_at = $2, circuit_open_until = $2, circuit_openings = 2,
			circuit_probe_delivery_id = ($3::uuid[])[1], circuit_probe_expires_at = $2::timestamptz + interval '1 minute' WHERE id = $1`},
		{name: "disabled", setup: `UPDATE wharf_outbox_endpoints SET enabled = false, disabled_reason = 'x', disabled_at = $2, consecutive_failures = 9,
			failing_since = $2 WHERE id = $1 AND $3::uuid[] IS NOT NULL`},
		{name: "finished-and-superseded", setup: `UPDATE wharf_outbox_deliveries SET status = 'succeeded', attempts = 1, succeeded_at = $2
			WHERE id = ($3::uuid[])[2] AND endpoint_id = $1`,
			mutate: func(ps []*dbsqlc.OutboxAttemptRecordParams) { ps[2].Generation++ }},
		{name: "half-open-first-superseded", setup: `UPDATE wharf_outbox_endpoints SET consecutive_failures = 5, failing_since = $2,
			circuit_state = 'half_open', circuit_opened_at = $2, circuit_open_until = $2, circuit_openings = 1 WHERE id = $1 AND $3::uuid[] IS NOT NULL`,
			slots:  []int32{0, 1, 2},
			mutate: func(ps []*dbsqlc.OutboxAttemptRecordParams) { ps[0].Generation++ }},
		{name: "leases", setup: `UPDATE wharf_outbox_leases SET delivery_id = ($3::uuid[])[3], expires_at = $2::timestamptz + interval '1 hour'
			WHERE endpoint_id = $1 AND slot = 3`, slots: []int32{3, admission.NoSlot, 1}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
			run := func(combined bool) string {
				ctx := context.Background()
				e, pool, eps, rows := combineSetup(t, []int32{4}, 3)
				require.NoError(t, e.queries.OutboxLeaseSlotsCreate(ctx, dbsqlc.OutboxLeaseSlotsCreateParams{EndpointID: eps[0], LastSlot: 3}))
				ids := make([]uuid.UUID, len(rows))
				for i, r := range rows {
					ids[i] = r.ID
				}
				slots := sc.slots
				if slots == nil {
					slots = []int32{2, 0, 1}
				}
				for i, s := range slots {
					if s >= 0 {
						_, err := pool.Exec(ctx, `UPDATE wharf_outbox_leases SET delivery_id = $3, expires_at = now() + interval '1 hour' WHERE endpoint_id = $1 AND slot = $2`, eps[0], s, ids[i])
						require.NoError(t, err)
					}
				}
				_, err := pool.Exec(ctx, sc.setup, eps[0], t0, pgxtx.UUIDTexts(ids))
				require.NoError(t, err)
				params := make([]*dbsqlc.OutboxAttemptRecordParams, len(rows))
				for i, r := range rows {
					p := combineParams(t, e, r, slots[i], true)
					p.AttemptID = uuid.MustParse(fmt.Sprintf("00000000-0000-7000-8000-%012d", i))
					p.AttemptedAt = t0
					p.Now = t0.Add(time.Duration(i) * 300 * time.Millisecond) // each attempt's own clock reading
					p.StaleBefore = p.Now.Add(-time.Second)
					p.ResponseBody = []byte(fmt.Sprintf("body %d", i))
					params[i] = p
				}
				if sc.mutate != nil {
					sc.mutate(params)
				}
				var outs []*dbsqlc.OutboxAttemptRecordRow
				var errs []error
				if combined {
					all := []int{0, 1, 2}
					require.True(t, allSucceeded(params, all))
					outs, errs = e.recordMany(ctx, params)
				} else {
					order := []int{0, 1, 2}
					slices.SortFunc(order, func(a, b int) int {
						pa, pb := params[a], params[b]
						return cmp.Or(cmp.Compare(pa.LeaseSlot, pb.LeaseSlot), slices.Compare(pa.DeliveryID[:], pb.DeliveryID[:]))
					})
					outs, errs = make([]*dbsqlc.OutboxAttemptRecordRow, 3), make([]error, 3)
					require.NoError(t, e.recordBatch(ctx, params, order, outs, errs))
				}
				state := ""
				closed := 0
				for i := range params {
					if errs[i] != nil {
						require.ErrorIs(t, errs[i], pgx.ErrNoRows)
						state += fmt.Sprintf("attempt %d: no row\n", i)
						continue
					}
					state += fmt.Sprintf("attempt %d: attempts %d\n", i, outs[i].Attempts)
					if outs[i].CircuitClosed {
						closed++
					}
				}
				if sc.name != "half-open-first-superseded" {
					state += fmt.Sprintf("circuit closed reported %d times\n", closed)
				} else {
					require.LessOrEqual(t, closed, 1)
				}
				dump := func(q string) {
					var s string
					require.NoError(t, pool.QueryRow(ctx, q, eps[0], pgxtx.UUIDTexts(ids), t0).Scan(&s))
					state += s + "\n"
				}
				// timestamps as offsets from t0; ids as indexes
				dump(`SELECT to_jsonb(x)::text FROM (SELECT enabled, disabled_reason, disabled_at - $3 AS disabled_at, consecutive_failures,
					failing_since - $3 AS failing_since, last_failure_at - $3 AS last_failure_at,
					circuit_state, circuit_opened_at - $3 AS opened, circuit_open_until - $3 AS until, circuit_openings,
					array_position($2::uuid[], circuit_probe_delivery_id) AS probe, circuit_probe_expires_at - $3 AS probe_exp
					FROM wharf_outbox_endpoints WHERE id = $1) x`)
				dump(`SELECT jsonb_agg(to_jsonb(x) ORDER BY x.i)::text FROM (SELECT array_position($2::uuid[], id) AS i, status, attempts, last_status_code,
					last_error, succeeded_at - $3 AS succeeded_at, throttled_until,
					-- rows no attempt here recorded keep their publication times, which differ between the two databases
					CASE WHEN last_status_code IS NOT NULL THEN next_attempt_at - $3 END AS next,
					CASE WHEN last_status_code IS NOT NULL THEN updated_at - $3 END AS updated_at
					FROM wharf_outbox_deliveries WHERE endpoint_id = $1) x`)
				dump(`SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.id)::text, '[]') FROM (SELECT id, array_position($2::uuid[], delivery_id) AS d, attempt, status,
					status_code, encode(response_body, 'escape') AS body, response_truncated, error, duration_us, attempted_at - $3 AS at
					FROM wharf_outbox_attempts WHERE endpoint_id = $1) x`)
				dump(`SELECT jsonb_agg(to_jsonb(x) ORDER BY x.slot)::text FROM (SELECT slot, array_position($2::uuid[], delivery_id) AS d,
					expires_at > now() AS live FROM wharf_outbox_leases WHERE endpoint_id = $1 AND $3::timestamptz IS NOT NULL) x`)
				if combined && sc.name == "stale" {
					var last time.Time
					require.NoError(t, pool.QueryRow(ctx, `SELECT last_success_at FROM wharf_outbox_endpoints WHERE id = $1`, eps[0]).Scan(&last))
					require.True(t, last.Equal(t0.Add(600*time.Millisecond)), "the latest success's time: %s", last.Sub(t0))
				}
				return state
			}
			perAttempt := run(false)
			combined := run(true)
			require.Equal(t, perAttempt, combined, "OutboxAttemptRecordSucceeded left a different state than OutboxAttemptRecord per attempt")
		})
	}
}
