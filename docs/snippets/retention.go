package snippets

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/jobs"
	"github.com/wharfhq/wharf/wharfriver"
)

// attachRetention is the README's retention configuration.
func attachRetention(riverCfg *river.Config, pool *pgxpool.Pool, ib *inbox.Inbox) error {
	// readme:begin retention
	retention := &jobs.Config{DedupeWindow: 96 * time.Hour, SourceRetryWindows: map[string]time.Duration{"stripe": 72 * time.Hour}}
	// Configure rejects a dedupe window shorter than a sender's retries.
	if err := wharfriver.Configure(riverCfg, &wharfriver.Components{Pool: pool, Inbox: ib, Jobs: retention}); err != nil {
		return err
	}
	// readme:end
	return nil
}
