package broker

import "context"

// SetWaitingHook makes WaitResult call f once its subscription to jobID's
// key is set up and it has found no result yet, so tests can order events without sleeping.
func SetWaitingHook(b *Broker, f func(jobID string)) { b.waitingHook = f }

// RenewAnchor renews the jobs stream's anchor, as PublishJob does every
// anchorEvery jobs.
func RenewAnchor(ctx context.Context, b *Broker) error { return b.renewAnchor(ctx) }

// AnchorSubject is the subject of the jobs stream's anchor.
const AnchorSubject = anchorSubject

// HoldBlobReads takes every result blob read slot of b; the func gives
// them back.
func HoldBlobReads(b *Broker) func() {
	for range maxBlobReads {
		b.blobReads <- struct{}{}
	}
	return func() {
		for range maxBlobReads {
			<-b.blobReads
		}
	}
}
