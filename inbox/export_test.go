package inbox

// GatheringDeliveries is how many deliveries the HTTP handler's open batch
// (the one taking members, not yet committing) holds.
func GatheringDeliveries(ib *Inbox) int {
	ib.batcher.mu.Lock()
	defer ib.batcher.mu.Unlock()
	if ib.batcher.open == nil {
		return 0
	}
	return len(ib.batcher.open.msgs)
}
