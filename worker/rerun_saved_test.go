package worker

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/wire"
)

// A job whose session's files were saved after it (an earlier attempt ran it
// to its end, confirmed its claim and saved them) but whose result was never
// stored (that attempt's worker stopped or died in between, or could not
// store it) is not run again over those files: its caller is told that it
// ran, that its output is lost, and that it was not run again. Before, the
// next attempt ran it on the files the first run had left: through a
// two-worker cluster, with the first worker stopped (SIGSTOP) right after
// its save, a job that appended a line and counted the lines answered ok
// with 2, the line in the session's file twice.
func TestJobWhoseFilesWereSavedAfterItIsNotRunAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fx := newLifecycleFixture(t)
	w := startRedisWorker(t, ctx, fx, fx.store, "saved", slog.DiscardHandler)
	const scope = "saved-scope"
	run := func(code string, opts ...broker.PublishOption) (*wire.Job, *wire.Result) {
		t.Helper()
		job := &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: scope, Code: code,
			Filename: "main.py", TimeoutMS: 30000, Deadline: time.Now().Add(time.Minute).UTC()}
		return job, publishAndWait(ctx, t, fx.broker, job, opts...)
	}
	job, res := run("open('log', 'a').write('x\\n')\nprint(open('log').read().count('x'))")
	if res.Status != wire.StatusOK || res.Stdout != "1\n" {
		t.Fatalf("the first run: %+v", res)
	}
	if rec, err := w.readWorkspace(ctx, scope); err != nil || rec.Snapshot != job.ID {
		t.Fatalf("the session's record: %+v %v, want the snapshot saved after job %s", rec, err, job.ID)
	}
	// As if the attempt's worker had stopped between its save and its
	// result: no result, the claim given up (or taken over).
	js, err := jetstream.New(fx.broker.Conn())
	if err != nil {
		t.Fatal(err)
	}
	for bucket, key := range map[string]string{wire.ResultsBucket: job.ID, broker.ClaimsBucket: job.ID} {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		if err := kv.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	again := publishAndWait(ctx, t, fx.broker, job, broker.WithMsgID(job.ID+"-again"))
	if again.Status != wire.StatusInternal || !strings.Contains(again.Message, "not run again") {
		t.Errorf("the job delivered again: %+v, want it not run, its caller told why", again)
	}
	if _, res := run("print(open('log').read().count('x'))"); res.Stdout != "1\n" {
		t.Fatalf("the session's file afterwards: %+v, want the job's line once", res)
	}
}

func publishAndWait(ctx context.Context, t *testing.T, b *broker.Broker, job *wire.Job, opts ...broker.PublishOption) *wire.Result {
	t.Helper()
	if err := b.PublishJob(ctx, job, opts...); err != nil {
		t.Fatal(err)
	}
	res, err := b.WaitResult(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
