// Package wharfriver attaches Wharf to an application's River client in
// one call: Configure adds the workers, queues and periodic jobs of the
// Wharf components the application uses to its river.Config, fills the
// settings Wharf depends on when they are unset, and refuses the values
// that would break a guarantee ([ErrInvalidConfig], every problem listed).
// See docs/operations.md, "River configuration".
//
//	cfg := &river.Config{Logger: logger} // the app's own queues and workers too
//	if err := wharfriver.Configure(cfg, &wharfriver.Components{
//		Pool: pool, Inbox: ib, Outbox: ob, // nil components are left out
//	}); err != nil {
//		return err
//	}
//	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
package wharfriver
