package jobs

// SetBeforeFinalize makes every prune call f after it takes its turn and
// before it completes an interrupted detach, until the returned function
// restores the default.
func SetBeforeFinalize(f func()) (restore func()) {
	beforeFinalize = f
	return func() { beforeFinalize = func() {} }
}
