package outbox_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
)

// secretKey is a test key: 32 bytes, all b.
func secretKey(id string, b byte) outbox.SecretKey {
	return outbox.SecretKey{ID: id, Key: bytes.Repeat([]byte{b}, 32)}
}

// keyedConfig is testConfig with the key ring keys.
func keyedConfig(keys ...outbox.SecretKey) *outbox.Config {
	cfg := testConfig()
	cfg.SecretKeys = keys
	return cfg
}

// newOutbox is another Outbox on pool: a node with another config.
func newOutbox(t *testing.T, pool *pgxpool.Pool, cfg *outbox.Config) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.New(pool, cfg)
	require.NoError(t, err)
	return ob
}

// storedRow is what an endpoint's row holds of its secrets.
type storedRow struct {
	Secret, PreviousSecret, Auth string
}

func (r storedRow) String() string { return r.Secret + " " + r.PreviousSecret + " " + r.Auth }

func readStored(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) storedRow {
	t.Helper()
	var r storedRow
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT secret, COALESCE(previous_secret, ''), auth::text FROM wharf_outbox_endpoints WHERE id = $1`, id,
	).Scan(&r.Secret, &r.PreviousSecret, &r.Auth))
	return r
}

// requireNoPlaintext fails when the row holds any of the secrets, or the
// key material of a whsec_ one.
func requireNoPlaintext(t *testing.T, row storedRow, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		require.NotContains(t, row.String(), s)
		if key, ok := strings.CutPrefix(s, "whsec_"); ok {
			require.NotContains(t, row.String(), key[:16])
		}
	}
}

// withRiver runs fn while a River client works ob's deliveries, and stops
// the client before it returns: a node running for a while.
func withRiver(t *testing.T, pool *pgxpool.Pool, ob *outbox.Outbox, fn func()) {
	t.Helper()
	client := startClient(t, pool, ob, nil)
	defer stopClient(t, client)
	fn()
}

// requireDelivered fails unless the sink got the event signed with secret.
func requireDelivered(t *testing.T, s *sink, eventID, secret string) {
	t.Helper()
	for _, r := range s.all() {
		if r.Header.Get("webhook-id") == eventID {
			require.NoError(t, r.verifyWith(secret))
			return
		}
	}
	require.Failf(t, "not delivered", "event %s", eventID)
}

func TestNewChecksSecretKeys(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	key := bytes.Repeat([]byte{0xAB}, 32)
	_, err := outbox.New(pool, &outbox.Config{SecretKeys: []outbox.SecretKey{
		{ID: "k1", Key: key}, {ID: "k1", Key: key}, {ID: "bad id", Key: key}, {ID: "k2", Key: key[:31]},
	}})
	require.ErrorIs(t, err, outbox.ErrInvalidConfig)
	for _, want := range []string{`ID "k1" repeats SecretKeys[0]'s`, "SecretKeys[2].ID must be", `SecretKeys[3] (ID "k2"): Key must be 32 bytes (AES-256), is 31`} {
		require.ErrorContains(t, err, want)
	}
	require.NotContains(t, err.Error(), base64.StdEncoding.EncodeToString(key)[:8])
	require.NotContains(t, strings.ToLower(err.Error()), "abab")

	// The caller's key can change after New: the outbox keeps its copy.
	cfg := &outbox.Config{SecretKeys: []outbox.SecretKey{{ID: "k1", Key: bytes.Clone(key)}}}
	ob, err := outbox.New(pool, cfg)
	require.NoError(t, err)
	ep, err := ob.EndpointCreate(context.Background(), &outbox.EndpointParams{URL: "https://a.example/h"})
	require.NoError(t, err)
	clear(cfg.SecretKeys[0].Key)
	got, err := ob.EndpointSecret(context.Background(), ep.ID)
	require.NoError(t, err)
	require.Equal(t, ep.Secret, got)
}

// The stored columns hold no secret after create, rotate and auth updates;
// reads return them in plaintext, and describe auth as without a ring.
func TestSecretsEncryptedAtRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, keyedConfig(secretKey("k1", 1)))

	ep := b.endpoint(t, "https://a.example/hook", &outbox.EndpointParams{Auth: &outbox.EndpointAuth{BearerToken: bearerSecret}})
	row := readStored(t, b.pool, ep.ID)
	require.True(t, strings.HasPrefix(row.Secret, "wharfenc:v1:k1:"), row.Secret)
	require.Contains(t, row.Auth, `"token": "wharfenc:v1:k1:`)
	require.Contains(t, row.Auth, `"kind": "bearer"`)
	requireNoPlaintext(t, row, ep.Secret, bearerSecret)
	got, err := b.outbox.EndpointSecret(ctx, ep.ID)
	require.NoError(t, err)
	require.Equal(t, ep.Secret, got)

	rotated, err := b.outbox.EndpointRotateSecret(ctx, ep.ID, nil)
	require.NoError(t, err)
	row = readStored(t, b.pool, ep.ID)
	require.True(t, strings.HasPrefix(row.Secret, "wharfenc:v1:k1:"))
	require.True(t, strings.HasPrefix(row.PreviousSecret, "wharfenc:v1:k1:"))
	requireNoPlaintext(t, row, ep.Secret, rotated.Secret, bearerSecret)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		got, err = b.outbox.EndpointSecretTx(ctx, tx, ep.ID)
		return err
	}))
	require.Equal(t, rotated.Secret, got)

	updated, err := b.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{
		Auth: &outbox.EndpointAuth{Basic: &outbox.BasicAuth{Username: "wharf", Password: basicSecret}},
	})
	require.NoError(t, err)
	require.Equal(t, &outbox.EndpointAuthInfo{Kind: outbox.AuthBasic, Username: "wharf"}, updated.Auth)
	row = readStored(t, b.pool, ep.ID)
	require.Contains(t, row.Auth, `"username": "wharf"`, "identifiers stay readable")
	require.Contains(t, row.Auth, `"password": "wharfenc:v1:k1:`)
	requireNoPlaintext(t, row, rotated.Secret, basicSecret)

	oauth := &outbox.EndpointAuth{OAuth2: &outbox.OAuth2ClientCredentials{
		TokenURL: "https://auth.example/token", ClientID: "client-1", ClientSecret: clientSecret, Scopes: []string{"w"},
	}}
	updated, err = b.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{Auth: oauth})
	require.NoError(t, err)
	require.Equal(t, "client-1", updated.Auth.ClientID)
	row = readStored(t, b.pool, ep.ID)
	require.Contains(t, row.Auth, `"client_secret": "wharfenc:v1:k1:`)
	requireNoPlaintext(t, row, rotated.Secret, clientSecret)

	// EndpointEnsure compares the decrypted values: nothing to update.
	res, err := b.outbox.EndpointEnsure(ctx, &outbox.EndpointParams{URL: ep.URL, Secret: rotated.Secret, Auth: oauth})
	require.NoError(t, err)
	require.False(t, res.Created)
	require.False(t, res.Updated)
	require.Equal(t, rotated.Secret, res.Secret)
	_, err = b.outbox.EndpointEnsure(ctx, &outbox.EndpointParams{URL: ep.URL, Secret: ep.Secret, Auth: oauth})
	require.ErrorIs(t, err, outbox.ErrInvalidEndpoint, "another secret")
	created, err := b.outbox.EndpointEnsure(ctx, &outbox.EndpointParams{URL: "https://b.example/hook", Auth: oauth})
	require.NoError(t, err)
	require.True(t, created.Created)
	requireNoPlaintext(t, readStored(t, b.pool, created.ID), created.Secret, clientSecret)

	// A credential that reads as a sealed value is refused, ring or not.
	_, err = b.outbox.EndpointCreate(ctx, &outbox.EndpointParams{
		URL: "https://c.example/hook", Auth: &outbox.EndpointAuth{BearerToken: "wharfenc:v1:k1:AAAA"},
	})
	require.ErrorIs(t, err, outbox.ErrInvalidEndpoint)
}

// Deliveries sign with the decrypted secrets (both, during an overlap)
// and authenticate with the decrypted credentials.
func TestEncryptedSecretsDeliver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, logs := capturingConfig()
	cfg.SecretKeys = []outbox.SecretKey{secretKey("k1", 1)}
	b := setup(t, cfg)
	bearerSink, oauthSink := okSink(t), okSink(t)
	tokens := newTokenServer(t, 3600)
	bearer := b.endpoint(t, bearerSink.URL(), &outbox.EndpointParams{Auth: &outbox.EndpointAuth{BearerToken: bearerSecret}})
	rotated, err := b.outbox.EndpointRotateSecret(ctx, bearer.ID, nil)
	require.NoError(t, err)
	oauth := b.endpoint(t, oauthSink.URL(), &outbox.EndpointParams{Auth: &outbox.EndpointAuth{OAuth2: &outbox.OAuth2ClientCredentials{
		TokenURL: tokens.URL(), ClientID: "client-1", ClientSecret: clientSecret,
	}}})

	startRiver(t, b.pool, b.outbox)
	res := b.publish(t, &outbox.Event{Type: "a", Data: 1})
	b.awaitDelivery(t, bearer.ID, res[0].EventID, outbox.StatusSucceeded)
	b.awaitDelivery(t, oauth.ID, res[0].EventID, outbox.StatusSucceeded)

	requireDelivered(t, bearerSink, res[0].EventID, rotated.Secret)
	requireDelivered(t, bearerSink, res[0].EventID, bearer.Secret) // the overlap's previous secret
	require.Equal(t, "Bearer "+bearerSecret, bearerSink.all()[0].Header.Get("Authorization"))
	requireDelivered(t, oauthSink, res[0].EventID, oauth.Secret)
	require.Equal(t, []string{"client-1:" + clientSecret}, tokens.clients())
	require.Equal(t, "Bearer token-1", oauthSink.all()[0].Header.Get("Authorization"))
	requireNoSecrets(t, b, logs)
	require.NotContains(t, logs.String(), "wharfenc:")
}

// Rows written without a ring keep working once one is configured, and
// ReencryptSecrets seals them, once.
func TestPlaintextRowsReadThenReencrypted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, testConfig()) // no ring: plaintext, as before
	bearerSink, basicSink := okSink(t), okSink(t)
	bearer := b.endpoint(t, bearerSink.URL(), &outbox.EndpointParams{Auth: &outbox.EndpointAuth{BearerToken: bearerSecret}})
	basic := b.endpoint(t, basicSink.URL(), &outbox.EndpointParams{Auth: &outbox.EndpointAuth{Basic: &outbox.BasicAuth{Username: "u", Password: basicSecret}}})
	rotated, err := b.outbox.EndpointRotateSecret(ctx, basic.ID, nil)
	require.NoError(t, err)
	require.Equal(t, bearer.Secret, readStored(t, b.pool, bearer.ID).Secret, "stored in plaintext")
	_, err = b.outbox.ReencryptSecrets(ctx)
	require.ErrorIs(t, err, outbox.ErrInvalidConfig, "nothing to seal with")

	sealed := newOutbox(t, b.pool, keyedConfig(secretKey("k1", 1)))
	got, err := sealed.EndpointSecret(ctx, bearer.ID)
	require.NoError(t, err)
	require.Equal(t, bearer.Secret, got)
	first := b.publish(t, &outbox.Event{Type: "a", Data: 1})[0].EventID
	withRiver(t, b.pool, sealed, func() {
		b.awaitDelivery(t, bearer.ID, first, outbox.StatusSucceeded)
		b.awaitDelivery(t, basic.ID, first, outbox.StatusSucceeded)
	})

	n, err := sealed.ReencryptSecrets(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for _, id := range []uuid.UUID{bearer.ID, basic.ID} {
		row := readStored(t, b.pool, id)
		require.True(t, strings.HasPrefix(row.Secret, "wharfenc:v1:k1:"))
		requireNoPlaintext(t, row, bearer.Secret, basic.Secret, rotated.Secret, bearerSecret, basicSecret)
	}
	require.True(t, strings.HasPrefix(readStored(t, b.pool, basic.ID).PreviousSecret, "wharfenc:v1:k1:"))
	n, err = sealed.ReencryptSecrets(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "idempotent")

	second := b.publish(t, &outbox.Event{Type: "a", Data: 2})[0].EventID
	withRiver(t, b.pool, sealed, func() {
		b.awaitDelivery(t, bearer.ID, second, outbox.StatusSucceeded)
		b.awaitDelivery(t, basic.ID, second, outbox.StatusSucceeded)
	})
	for _, event := range []string{first, second} {
		requireDelivered(t, bearerSink, event, bearer.Secret)
		requireDelivered(t, basicSink, event, rotated.Secret)
		requireDelivered(t, basicSink, event, basic.Secret)
	}
	for _, r := range bearerSink.all() {
		require.Equal(t, "Bearer "+bearerSecret, r.Header.Get("Authorization"))
	}

	// The node without a ring now meets sealed values: a clear error.
	_, err = b.outbox.EndpointSecret(ctx, bearer.ID)
	require.ErrorIs(t, err, outbox.ErrSecretDecrypt)
	require.ErrorContains(t, err, `sealed with key "k1", but Config.SecretKeys is empty`)
}

// Rotation of the key: write with k1, make k2 current keeping k1 (all
// still delivers), reencrypt, drop k1 (all still delivers).
func TestSecretKeyRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k1, k2 := secretKey("2026-05", 1), secretKey("2026-11", 2)
	b := setup(t, keyedConfig(k1))
	sinks := []*sink{okSink(t), okSink(t), okSink(t)}
	var eps []*outbox.EndpointWithSecret
	for i, s := range sinks[:2] {
		eps = append(eps, b.endpoint(t, s.URL(), &outbox.EndpointParams{Auth: &outbox.EndpointAuth{BearerToken: fmt.Sprintf("tok-%d", i)}}))
	}

	both := newOutbox(t, b.pool, keyedConfig(k2, k1))
	third, err := both.EndpointCreate(ctx, &outbox.EndpointParams{URL: sinks[2].URL(), Auth: &outbox.EndpointAuth{BearerToken: "tok-2"}})
	require.NoError(t, err)
	eps = append(eps, third)
	require.True(t, strings.HasPrefix(readStored(t, b.pool, third.ID).Secret, "wharfenc:v1:2026-11:"), "new writes use the current key")
	require.True(t, strings.HasPrefix(readStored(t, b.pool, eps[0].ID).Secret, "wharfenc:v1:2026-05:"))

	deliverAll := func(ob *outbox.Outbox, n int) {
		event := b.publish(t, &outbox.Event{Type: "a", Data: n})[0].EventID
		withRiver(t, b.pool, ob, func() {
			for _, ep := range eps {
				b.awaitDelivery(t, ep.ID, event, outbox.StatusSucceeded)
			}
		})
		for i, ep := range eps {
			requireDelivered(t, sinks[i], event, ep.Secret)
			require.Equal(t, fmt.Sprintf("Bearer tok-%d", i), sinks[i].all()[n-1].Header.Get("Authorization"))
		}
	}
	deliverAll(both, 1)

	n, err := both.ReencryptSecrets(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n, "the two rows sealed with the old key")
	for _, ep := range eps {
		row := readStored(t, b.pool, ep.ID)
		require.True(t, strings.HasPrefix(row.Secret, "wharfenc:v1:2026-11:"))
		require.NotContains(t, row.String(), "2026-05")
	}

	k2only := newOutbox(t, b.pool, keyedConfig(k2))
	deliverAll(k2only, 2)
	n, err = k2only.ReencryptSecrets(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
}

// A ring without the key a value names: EndpointSecret and deliveries
// fail with a clear error that holds no secret; no request is sent; the
// key's return makes a replay deliver.
func TestMissingSecretKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k1, k2 := secretKey("k1", 1), secretKey("k2", 2)
	cfg, logs := capturingConfig()
	cfg.SecretKeys = []outbox.SecretKey{k2}
	b := setup(t, cfg)
	s := okSink(t)
	writer := newOutbox(t, b.pool, keyedConfig(k1))
	ep, err := writer.EndpointCreate(ctx, &outbox.EndpointParams{URL: s.URL(), Auth: &outbox.EndpointAuth{BearerToken: bearerSecret}})
	require.NoError(t, err)
	row := readStored(t, b.pool, ep.ID)

	requireClear := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, outbox.ErrSecretDecrypt)
		require.ErrorContains(t, err, `sealed with key "k1", which Config.SecretKeys lacks`)
		require.ErrorContains(t, err, ep.ID.String())
		require.NotContains(t, err.Error(), row.Secret[len("wharfenc:v1:k1:"):])
		requireNoPlaintext(t, storedRow{Secret: err.Error()}, ep.Secret, bearerSecret)
	}
	_, err = b.outbox.EndpointSecret(ctx, ep.ID)
	requireClear(err)
	_, err = b.outbox.EndpointEnsure(ctx, &outbox.EndpointParams{URL: s.URL()})
	requireClear(err)

	n, err := b.outbox.ReencryptSecrets(ctx)
	requireClear(err)
	require.Zero(t, n)
	require.Equal(t, row, readStored(t, b.pool, ep.ID), "left as it was")

	// The key-less node stops before the key arrives: a job it took after
	// the replay would fail again.
	event := b.publish(t, &outbox.Event{Type: "a", Data: 1})[0].EventID
	var d *outbox.Delivery
	withRiver(t, b.pool, b.outbox, func() { d = b.awaitDelivery(t, ep.ID, event, outbox.StatusDead) })
	require.Contains(t, d.LastError, `signing secret: sealed with key "k1", which Config.SecretKeys lacks`)
	attempts, err := b.outbox.AttemptList(ctx, d.ID)
	require.NoError(t, err)
	require.Len(t, attempts, len(cfg.RetrySchedule), "each run is a failed attempt, on the schedule")
	for _, a := range attempts {
		require.Nil(t, a.StatusCode, "nothing was sent")
		require.Contains(t, a.Error, `key "k1"`)
	}
	require.Empty(t, s.all())
	requireNoSecrets(t, b, logs)
	require.NotContains(t, logs.String(), ep.Secret)
	require.NotContains(t, logs.String(), row.Secret[len("wharfenc:v1:k1:"):])

	// The key arrives: the replay delivers.
	withKey := newOutbox(t, b.pool, keyedConfig(k2, k1))
	require.NoError(t, withKey.DeliveryReplay(ctx, d.ID))
	withRiver(t, b.pool, withKey, func() { b.awaitDelivery(t, ep.ID, event, outbox.StatusSucceeded) })
	requireDelivered(t, s, event, ep.Secret)
}

// A ciphertext altered, or copied to another endpoint's row, fails
// authentication: reads and deliveries fail with ErrSecretDecrypt.
func TestTamperedOrMovedCiphertext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, keyedConfig(secretKey("k1", 1)))
	sinks := []*sink{okSink(t), okSink(t), okSink(t)}
	var eps []*outbox.EndpointWithSecret
	for i, s := range sinks {
		eps = append(eps, b.endpoint(t, s.URL(), &outbox.EndpointParams{Auth: &outbox.EndpointAuth{BearerToken: fmt.Sprintf("tok-%d", i)}}))
	}
	a, moved, movedAuth := eps[0], eps[1], eps[2]

	// A's secret, one character changed.
	secret := []byte(readStored(t, b.pool, a.ID).Secret)
	i := len("wharfenc:v1:k1:") + 20
	secret[i] = map[bool]byte{true: 'B', false: 'A'}[secret[i] == 'A']
	_, err := b.pool.Exec(ctx, `UPDATE wharf_outbox_endpoints SET secret = $2 WHERE id = $1`, a.ID, string(secret))
	require.NoError(t, err)
	// B gets C's secret, C gets A's auth: bound to their rows.
	_, err = b.pool.Exec(ctx, `UPDATE wharf_outbox_endpoints
		SET secret = (SELECT secret FROM wharf_outbox_endpoints WHERE id = $2) WHERE id = $1`, moved.ID, movedAuth.ID)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE wharf_outbox_endpoints
		SET auth = (SELECT auth FROM wharf_outbox_endpoints WHERE id = $2) WHERE id = $1`, movedAuth.ID, a.ID)
	require.NoError(t, err)

	for _, ep := range eps[:2] {
		_, err := b.outbox.EndpointSecret(ctx, ep.ID)
		require.ErrorIs(t, err, outbox.ErrSecretDecrypt)
		require.ErrorContains(t, err, `signing secret: fails authentication under key "k1"`)
	}
	got, err := b.outbox.EndpointSecret(ctx, movedAuth.ID)
	require.NoError(t, err, "C's own secret is intact")
	require.Equal(t, movedAuth.Secret, got)

	startRiver(t, b.pool, b.outbox)
	event := b.publish(t, &outbox.Event{Type: "a", Data: 1})[0].EventID
	for i, ep := range eps {
		d := b.awaitDelivery(t, ep.ID, event, outbox.StatusDead)
		want := "signing secret: fails authentication"
		if ep == movedAuth {
			want = "bearer token: fails authentication"
		}
		require.Contains(t, d.LastError, want)
		require.Empty(t, sinks[i].all(), "nothing sent")
	}
	n, err := b.outbox.ReencryptSecrets(ctx)
	require.NoError(t, err, "every value is sealed with the current key: nothing to open")
	require.Zero(t, n)
}

// Two ReencryptSecrets at once, during deliveries and secret rotations,
// from a mix of plaintext rows and rows sealed with the old key: each row
// is rewritten once, nothing is lost, every delivery is signed and
// authenticated right.
func TestReencryptConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const endpoints, events, rotations = 250, 4, 20
	k1, k2 := secretKey("k1", 1), secretKey("k2", 2)
	b := setup(t, keyedConfig(k2, k1))
	plain, old := newOutbox(t, b.pool, testConfig()), newOutbox(t, b.pool, keyedConfig(k1))
	s := newSink(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		time.Sleep(time.Millisecond) // deliveries last while the runs go on
		w.WriteHeader(http.StatusNoContent)
	})
	secrets := map[string]string{} // bearer token → the endpoint's first secret
	var ids []uuid.UUID
	for i := range endpoints {
		writer := plain
		if i%2 == 1 {
			writer = old
		}
		token := fmt.Sprintf("tok-%03d", i)
		ep, err := writer.EndpointCreate(ctx, &outbox.EndpointParams{URL: s.URL(), Auth: &outbox.EndpointAuth{BearerToken: token}})
		require.NoError(t, err)
		secrets[token] = ep.Secret
		ids = append(ids, ep.ID)
	}

	for n := range events {
		b.publish(t, &outbox.Event{Type: "a", Data: n})
	}
	succeeded := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM wharf_outbox_deliveries WHERE status = 'succeeded'`).Scan(&n))
		return n
	}
	startRiver(t, b.pool, b.outbox)
	require.Eventually(t, func() bool { return succeeded() >= 50 }, 30*time.Second, 5*time.Millisecond)
	var (
		wg      sync.WaitGroup
		counts  [2]int
		errs    [3]error
		rotated sync.Map // endpoint id → its new secret
	)
	for i := range 2 {
		wg.Go(func() { counts[i], errs[i] = b.outbox.ReencryptSecrets(ctx) })
	}
	wg.Go(func() {
		for _, id := range ids[:rotations] {
			ep, err := b.outbox.EndpointRotateSecret(ctx, id, nil)
			if err != nil {
				errs[2] = err
				return
			}
			rotated.Store(id, ep.Secret)
		}
	})
	wg.Wait()
	t.Logf("deliveries done when the runs ended: %d of %d", succeeded(), endpoints*events)
	for _, err := range errs {
		require.NoError(t, err)
	}
	t.Logf("rewritten by each run: %v", counts)
	require.Equal(t, endpoints, counts[0]+counts[1], "each row rewritten once: %v", counts)

	require.Eventually(t, func() bool { return succeeded() == endpoints*events }, 60*time.Second, 50*time.Millisecond)
	got := s.all()
	require.Len(t, got, endpoints*events, "one request each: no attempt failed")
	for _, r := range got {
		token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		secret, ok := secrets[token]
		require.True(t, ok, "a known bearer token")
		require.NoError(t, r.verifyWith(secret), "signed with the endpoint's secret (still signing during a rotation's overlap)")
	}

	var stale int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM wharf_outbox_endpoints
		WHERE NOT starts_with(secret, 'wharfenc:v1:k2:')
		   OR NOT starts_with(COALESCE(previous_secret, 'wharfenc:v1:k2:'), 'wharfenc:v1:k2:')
		   OR NOT starts_with(auth->>'token', 'wharfenc:v1:k2:')`).Scan(&stale))
	require.Zero(t, stale, "every row sealed with the current key")
	k2only := newOutbox(t, b.pool, keyedConfig(k2))
	for _, id := range ids {
		want := secrets[fmt.Sprintf("tok-%03d", slices.Index(ids, id))]
		if s, ok := rotated.Load(id); ok {
			want = s.(string)
		}
		got, err := k2only.EndpointSecret(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, got, "no rotation was overwritten")
	}
	n, err := b.outbox.ReencryptSecrets(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
}
