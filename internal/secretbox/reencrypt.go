package secretbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/outboxtype"
)

// maxReportedFailures caps the endpoints Reencrypt's error names.
const maxReportedFailures = 10

// Reencrypt seals every endpoint's signing secrets and auth credentials
// with the current key and returns how many endpoints it rewrote (see
// outbox.ReencryptSecrets, which says when it is safe). It works
// ReencryptBatch endpoints per transaction, locking only those it
// rewrites. A value it cannot open leaves its endpoint as it was; the
// others are rewritten, and the error, where errors.Is(err, ErrDecrypt) is
// true, names those endpoints. The ring must have keys.
func (r *Ring) Reencrypt(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	total, after := 0, uuid.Nil
	var failed []error
	failures := 0
	for {
		var locked, rewritten int
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			q := dbsqlc.New(tx)
			rows, err := q.OutboxEndpointSecretsLock(ctx, dbsqlc.OutboxEndpointSecretsLockParams{
				AfterID: after, CurrentPrefix: r.currentPrefix(), MaxRows: int32(r.reencryptBatch),
			})
			if err != nil {
				return err
			}
			locked = len(rows)
			var set dbsqlc.OutboxEndpointSecretsSetParams
			for i := range rows {
				after = rows[i].ID
				if err := r.reseal(&rows[i], &set); err != nil {
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
// opened and sealed with it, or returns an ErrDecrypt error and adds
// nothing.
func (r *Ring) reseal(row *dbsqlc.OutboxEndpointSecretsLockRow, set *dbsqlc.OutboxEndpointSecretsSetParams) error {
	reseal := func(field, stored string) (string, error) {
		if r.isCurrent(stored) {
			return stored, nil
		}
		plaintext, err := r.Open(row.ID, field, stored)
		if err != nil {
			return "", err
		}
		return r.Seal(row.ID, field, plaintext)
	}
	secret, err := reseal(FieldSecret, row.Secret)
	if err != nil {
		return err
	}
	previous := ""
	if row.PreviousSecret != nil {
		if previous, err = reseal(FieldSecret, *row.PreviousSecret); err != nil {
			return err
		}
	}
	auth, err := outboxtype.DecodeAuth(row.Auth)
	if err != nil {
		return fmt.Errorf("%w: endpoint %s: %w", ErrDecrypt, row.ID, err)
	}
	if auth, err = auth.MapCredentials(reseal); err != nil {
		return err
	}
	authJSON, err := auth.Encode()
	if err != nil {
		return err
	}
	set.Ids = append(set.Ids, row.ID)
	set.Secrets = append(set.Secrets, secret)
	set.PreviousSecrets = append(set.PreviousSecrets, previous)
	set.Auths = append(set.Auths, string(authJSON))
	return nil
}
