package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// maxReportedFailures caps the endpoints ReencryptSecrets' error names.
const maxReportedFailures = 10

// ReencryptSecrets seals every endpoint's signing secrets and auth
// credentials with the current key (Config.SecretKeys[0]) and returns how
// many endpoints it rewrote: the plaintext of rows written before a key
// ring was configured, and values sealed with an older key of the ring.
// Afterwards no row needs a key other than the current one, so older keys
// can leave the ring.
//
// It works 100 endpoints per transaction, locking only those it rewrites,
// and is safe to run at any time: during deliveries (which read either
// form, both openable), beside endpoint writes (which wait for its batch,
// or make it skip their row), and on several nodes at once (each row is
// rewritten once). It is idempotent: a second run rewrites nothing. A
// node whose current key is still the old one goes on writing with it,
// and its rows may be missed: switch every node's current key first.
//
// A value it cannot open (sealed with a key the ring lacks, altered, or
// malformed) leaves its endpoint as it was; the others are rewritten, and
// the error, where errors.Is(err, ErrSecretDecrypt) is true, names those
// endpoints. Without Config.SecretKeys it returns an error where
// errors.Is(err, ErrInvalidConfig) is true.
func (o *Outbox) ReencryptSecrets(ctx context.Context) (int, error) {
	if !o.keys.enabled() {
		return 0, fmt.Errorf("%w: ReencryptSecrets needs Config.SecretKeys", ErrInvalidConfig)
	}
	total, after := 0, uuid.Nil
	var failed []error
	failures := 0
	for {
		var locked, rewritten int
		err := o.inTx(ctx, func(tx pgx.Tx) error {
			q := dbsqlc.New(tx)
			rows, err := q.OutboxEndpointSecretsLock(ctx, dbsqlc.OutboxEndpointSecretsLockParams{
				AfterID: after, CurrentPrefix: o.keys.currentPrefix(), MaxRows: reencryptBatch,
			})
			if err != nil {
				return err
			}
			locked = len(rows)
			var set dbsqlc.OutboxEndpointSecretsSetParams
			for i := range rows {
				after = rows[i].ID
				if err := o.reseal(&rows[i], &set); err != nil {
					failures++
					if len(failed) < maxReportedFailures {
						failed = append(failed, err)
					}
				}
			}
			rewritten = len(set.Ids)
			if rewritten == 0 {
				return nil
			}
			return q.OutboxEndpointSecretsSet(ctx, set)
		})
		if err != nil {
			return total, fmt.Errorf("outbox: reencrypt secrets: %w", err)
		}
		total += rewritten
		if locked == 0 {
			break
		}
	}
	if failures > 0 {
		return total, fmt.Errorf("outbox: reencrypt secrets: %d endpoints left as they were: %w", failures, errors.Join(failed...))
	}
	return total, nil
}

// reseal adds row to set with every value not sealed with the current key
// opened and sealed with it, or returns an ErrSecretDecrypt error and
// adds nothing.
func (o *Outbox) reseal(row *dbsqlc.OutboxEndpointSecretsLockRow, set *dbsqlc.OutboxEndpointSecretsSetParams) error {
	reseal := func(field, stored string) (string, error) {
		if o.keys.isCurrent(stored) {
			return stored, nil
		}
		plaintext, err := o.keys.open(row.ID, field, stored)
		if err != nil {
			return "", err
		}
		return o.keys.seal(row.ID, field, plaintext)
	}
	secret, err := reseal(fieldSecret, row.Secret)
	if err != nil {
		return err
	}
	previous := ""
	if row.PreviousSecret != nil {
		if previous, err = reseal(fieldSecret, *row.PreviousSecret); err != nil {
			return err
		}
	}
	auth, err := decodeAuth(row.Auth)
	if err != nil {
		return fmt.Errorf("%w: endpoint %s: %w", ErrSecretDecrypt, row.ID, err)
	}
	if auth, err = o.keys.mapAuth(auth, reseal); err != nil {
		return err
	}
	authJSON, err := auth.encode()
	if err != nil {
		return err
	}
	set.Ids = append(set.Ids, row.ID)
	set.Secrets = append(set.Secrets, secret)
	set.PreviousSecrets = append(set.PreviousSecrets, previous)
	set.Auths = append(set.Auths, string(authJSON))
	return nil
}
