package worker

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codexec/codexec/wire"
)

// A job cancelled while its delivery waits for another attempt's claim
// never runs once the claim is taken over: the cancel mark is read while
// the claim is written (before the job could be claimed at all), so a
// mark that comes during a long wait on the claim must still be seen.
func TestJobCancelledWhileItsClaimIsAwaitedNeverRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cf := newClaimFixture(t, ctx)
	// x lives and lists the job, until it lets go of it.
	var listing atomic.Bool
	listing.Store(true)
	bctx, stopBeat := context.WithCancel(context.Background())
	beatDone := make(chan struct{})
	t.Cleanup(func() { stopBeat(); <-beatDone })
	go func() {
		defer close(beatDone)
		for beat := uint64(1); ; beat++ {
			var jobs []string
			if listing.Load() {
				jobs = []string{cf.job.ID}
			}
			data, _ := json.Marshal(claimantRecord{Instance: "x@1", Beat: beat, Jobs: jobs})
			if err := cf.fx.store.Touch(bctx, cf.w.cfg.Keys.Claimants(), "x", data, claimTTL); err != nil && bctx.Err() == nil {
				t.Error(err)
			}
			select {
			case <-bctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	if err := cf.fx.broker.PublishJob(ctx, cf.job); err != nil {
		t.Fatal(err)
	}
	waitLog(ctx, t, cf.logs, "waiting for its result")
	time.Sleep(cancelMarkFresh) // the first read of the mark is older than that now
	if err := cf.fx.broker.CancelJob(ctx, cf.job.ID); err != nil {
		t.Fatal(err)
	}
	listing.Store(false) // x is done with the job, without a result: taken over
	res, err := cf.fx.broker.WaitResult(ctx, cf.job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != wire.StatusCancelled || res.Stdout != "" || res.WorkerID != "claims" {
		t.Errorf("result %+v, want the worker's cancelled result with no output", res)
	}
	if strings.Contains(cf.logs.String(), "job started") {
		t.Errorf("the cancelled job ran:\n%s", cf.logs.String())
	}
}
