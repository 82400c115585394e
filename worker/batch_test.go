package worker

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/wire"
)

// TestBatchJobs runs batch jobs on a real worker: the parameter row reaches
// the script as CODEXEC_PARAMS, and a job of a batch cancelled before it
// started is not run but answered cancelled.
func TestBatchJobs(t *testing.T) {
	fx := newLifecycleFixture(t)
	w, err := New(Config{
		ID: "batch", DataDir: fx.dataDir, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		Concurrency: 2, Pythons: []string{}, Logger: slog.New(slog.DiscardHandler),
	}, fx.broker, fx.store)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	job := func(scope, params string) *wire.Job {
		return &wire.Job{
			ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: scope, Batch: "b",
			Code: "import json, os\nprint(json.loads(os.environ['CODEXEC_PARAMS'])['x'] * 2)\n", Filename: "main.py",
			TimeoutMS: 30000, Deadline: time.Now().Add(time.Minute).UTC(), Params: []byte(params),
		}
	}
	run := job("b-live", `{"x": 21}`)
	run.BatchRow, run.BatchAttempt = 7, 1
	if err := fx.broker.CancelBatch(ctx, "b-gone"); err != nil {
		t.Fatal(err)
	}
	gone := job("b-gone", `{"x": 1}`)
	for _, err := range fx.broker.SubmitJobs(ctx, []*wire.Job{run, gone}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	res, err := fx.broker.WaitResult(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != wire.StatusOK || res.Stdout != "42\n" {
		t.Errorf("batch job: %s %q %q, want ok 42", res.Status, res.Stdout, res.Stderr)
	}
	if res.BatchRow != 7 || res.BatchAttempt != 1 {
		t.Errorf("the result of row 7, attempt 1 says row %d, attempt %d", res.BatchRow, res.BatchAttempt)
	}
	res, err = fx.broker.WaitResult(ctx, gone.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != wire.StatusCancelled || res.Stdout != "" {
		t.Errorf("job of a cancelled batch: %s %q, want cancelled without output", res.Status, res.Stdout)
	}
}
