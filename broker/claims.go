package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ClaimsBucket is the key-value bucket of job claims: job id → Claim.
const ClaimsBucket = "codexec-claims"

// Claim says which worker runs (or ran) a job. A worker claims a job
// before it starts it, create-only, so that a redelivery of the job to
// another worker finds the claim and does not start the job a second time
// while the claim's holder lives. How a holder's life is told is the
// worker's business (package worker): the broker only stores claims and
// makes their creation and takeover atomic.
type Claim struct {
	// Worker is the holder's worker id.
	Worker string `json:"worker"`
	// Instance tells one run of a worker process from the next with the
	// same id: a worker restarted under its id does not hold its former
	// self's claims.
	Instance string `json:"instance"`
	// Attempt is the delivery count of the job when it was claimed.
	Attempt int `json:"attempt"`
	// At is when the claim was made, by the holder's clock (for logs).
	At time.Time `json:"at"`
}

// HeldClaim is a stored claim and its revision, the token that TakeOverClaim
// and ReleaseClaim compare against.
type HeldClaim struct {
	Claim
	Revision uint64
}

// ErrClaimChanged is returned by TakeOverClaim and ReleaseClaim when the
// claim is no longer at the revision given: another worker changed it.
var ErrClaimChanged = errors.New("broker: claim changed since it was read")

// claimAttempts bounds ClaimJob's create-or-read loop, in which each turn
// found the key deleted between the two.
const claimAttempts = 5

// createClaims creates or updates the claims bucket. Claims live as long as
// results: a copy of a job delivered later (a redelivery, or its pool copy
// after a targeted worker went away) finds the claim and then the result.
func (b *Broker) createClaims(ctx context.Context) error {
	kv, err := b.js.CreateOrUpdateKeyValue(ctx, b.keyValueConfig(jetstream.KeyValueConfig{
		Bucket:      ClaimsBucket,
		Description: "codexec job claims by job id: which worker runs each job",
		History:     1,
		TTL:         b.cfg.Retention,
	}))
	if err != nil {
		return fmt.Errorf("broker: create bucket %s: %w", ClaimsBucket, err)
	}
	b.claims = kv
	return nil
}

// ClaimJob claims jobID for c, create-only. When the job had no claim it
// returns the new claim and won=true; when it had one, it returns that
// claim, unchanged, and won=false.
func (b *Broker) ClaimJob(ctx context.Context, jobID string, c Claim) (held HeldClaim, won bool, err error) {
	if !idRe.MatchString(jobID) {
		return HeldClaim{}, false, fmt.Errorf("broker: claim: invalid job id %q", jobID)
	}
	data, err := json.Marshal(c)
	if err != nil {
		return HeldClaim{}, false, fmt.Errorf("broker: claim job %s: %w", jobID, err)
	}
	for range claimAttempts {
		rev, err := b.claims.Create(ctx, jobID, data)
		if err == nil {
			return HeldClaim{Claim: c, Revision: rev}, true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return HeldClaim{}, false, fmt.Errorf("broker: claim job %s: %w", jobID, err)
		}
		held, found, err := b.GetClaim(ctx, jobID)
		if err != nil {
			return HeldClaim{}, false, err
		}
		if found {
			return held, false, nil
		}
		// Released between the create and the read: create again.
	}
	return HeldClaim{}, false, fmt.Errorf("broker: claim job %s: the claim kept changing", jobID)
}

// GetClaim returns jobID's claim; found is false when it has none (never
// claimed, released or expired).
func (b *Broker) GetClaim(ctx context.Context, jobID string) (held HeldClaim, found bool, err error) {
	if !idRe.MatchString(jobID) {
		return HeldClaim{}, false, fmt.Errorf("broker: get claim: invalid job id %q", jobID)
	}
	e, err := b.claims.Get(ctx, jobID)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return HeldClaim{}, false, nil
	}
	if err != nil {
		return HeldClaim{}, false, fmt.Errorf("broker: get claim %s: %w", jobID, err)
	}
	held = HeldClaim{Revision: e.Revision()}
	if err := json.Unmarshal(e.Value(), &held.Claim); err != nil {
		return HeldClaim{}, false, fmt.Errorf("broker: decode claim %s: %w", jobID, err)
	}
	return held, true, nil
}

// TakeOverClaim replaces jobID's claim, read at revision rev, with c. Of two
// workers taking over the same claim, one succeeds and the other gets
// ErrClaimChanged.
func (b *Broker) TakeOverClaim(ctx context.Context, jobID string, c Claim, rev uint64) (HeldClaim, error) {
	if !idRe.MatchString(jobID) {
		return HeldClaim{}, fmt.Errorf("broker: take over claim: invalid job id %q", jobID)
	}
	data, err := json.Marshal(c)
	if err != nil {
		return HeldClaim{}, fmt.Errorf("broker: take over claim %s: %w", jobID, err)
	}
	newRev, err := b.claims.Update(ctx, jobID, data, rev)
	if isWrongRevision(err) {
		return HeldClaim{}, fmt.Errorf("broker: take over claim %s: %w", jobID, ErrClaimChanged)
	}
	if err != nil {
		return HeldClaim{}, fmt.Errorf("broker: take over claim %s: %w", jobID, err)
	}
	return HeldClaim{Claim: c, Revision: newRev}, nil
}

// ConfirmClaim rewrites jobID's claim, unchanged, if it is still at
// revision held.Revision, and returns it at its new revision. A worker
// confirms its claim when its attempt has finished, before it saves the
// session's files or stores the result: a worker that took the claim over
// meanwhile (judging the holder dead while it was stopped or cut off)
// wrote at that revision first, and this returns ErrClaimChanged; a
// takeover that read the claim before the confirmation fails instead. So
// of two attempts of one job, exactly one keeps what it did.
func (b *Broker) ConfirmClaim(ctx context.Context, jobID string, held HeldClaim) (HeldClaim, error) {
	if !idRe.MatchString(jobID) {
		return HeldClaim{}, fmt.Errorf("broker: confirm claim: invalid job id %q", jobID)
	}
	data, err := json.Marshal(held.Claim)
	if err != nil {
		return HeldClaim{}, fmt.Errorf("broker: confirm claim %s: %w", jobID, err)
	}
	newRev, err := b.claims.Update(ctx, jobID, data, held.Revision)
	if isWrongRevision(err) {
		// A try of this very confirmation that timed out (NATS away, or
		// restarting) may have been written all the same, and the claim
		// moved on from held.Revision by it: the claim is still this
		// attempt's own, unchanged. Any other write (a takeover, or a
		// release and a new claim) stored another claim: another
		// attempt's, or at least a new At. Taken for a takeover, the
		// attempt dropped its files and result, and the next delivery ran
		// the job again on the same worker, over the files the first
		// attempt had left in the session's directory.
		cur, found, gerr := b.GetClaim(ctx, jobID)
		if gerr != nil {
			return HeldClaim{}, fmt.Errorf("broker: confirm claim %s: %w", jobID, gerr)
		}
		if found && sameClaim(cur.Claim, held.Claim) {
			return cur, nil
		}
	}
	if isWrongRevision(err) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return HeldClaim{}, fmt.Errorf("broker: confirm claim %s: %w", jobID, ErrClaimChanged)
	}
	if err != nil {
		return HeldClaim{}, fmt.Errorf("broker: confirm claim %s: %w", jobID, err)
	}
	return HeldClaim{Claim: held.Claim, Revision: newRev}, nil
}

// sameClaim reports whether a and b are one claim: the same holder's
// instance, attempt and time of claiming.
func sameClaim(a, b Claim) bool {
	return a.Worker == b.Worker && a.Instance == b.Instance && a.Attempt == b.Attempt && a.At.Equal(b.At)
}

// ReleaseClaim deletes jobID's claim if it is still at revision rev, so that
// the next delivery of the job claims it at once. A worker releases a
// claim when it gives a job back without a result.
func (b *Broker) ReleaseClaim(ctx context.Context, jobID string, rev uint64) error {
	if !idRe.MatchString(jobID) {
		return fmt.Errorf("broker: release claim: invalid job id %q", jobID)
	}
	err := b.claims.Delete(ctx, jobID, jetstream.LastRevision(rev))
	if isWrongRevision(err) {
		return fmt.Errorf("broker: release claim %s: %w", jobID, ErrClaimChanged)
	}
	if err != nil {
		return fmt.Errorf("broker: release claim %s: %w", jobID, err)
	}
	return nil
}

// isWrongRevision reports whether err is the server refusing a write
// whose expected last revision does not match.
func isWrongRevision(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
