package snippets

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/inbox"
)

// reconcilePayment applies what a late arrival's earlier message did not.
func reconcilePayment(context.Context, pgx.Tx, []byte) error { return nil }

// handleReconcile is docs/inbox.md's reconcile handler for late arrivals.
func handleReconcile(ib *inbox.Inbox) {
	// readme:begin reconcile
	ib.HandleReconcile("stripe", func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		// msg.RedeliveryOf names the earlier message; its ProcessedAt may be nil.
		return reconcilePayment(ctx, tx, msg.Body)
	})
	// readme:end
}
