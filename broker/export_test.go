package broker

// SetWaitingHook makes WaitResult call f once the watch on jobID is set
// up and has found no result yet, so tests can order events without sleeping.
func SetWaitingHook(b *Broker, f func(jobID string)) { b.waitingHook = f }
