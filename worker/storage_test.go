package worker

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
	"github.com/codexec/codexec/wire"
)

// What a session's jobs leave on the worker's disk and on the queue's
// server once they are done: no copy of their code. Six 16 MiB calls once
// left 96 MiB of scripts under scripts/<scope>/ for ever, and each large
// job's code in the blobs store until Retention. The session's
// code-file mirror (scripts/<scope>/files/, codefiles.Config.MirrorDir in
// `codexec dev`) is not the worker's to prune and stays.
func TestDoneJobsLeaveNoCodeBehind(t *testing.T) {
	fx := newLifecycleFixture(t)
	// Messages of 1 MiB at most, so that a 2 MiB job's code goes through
	// the blobs store.
	e := brokertest.StartNATSWith(t, broker.EmbeddedConfig{MaxPayload: 1 << 20})
	b := brokertest.Open(t, e, broker.Config{})
	w, err := New(Config{
		ID: "storage", DataDir: fx.dataDir, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		Concurrency: 2, Pythons: []string{}, Logger: slog.New(slog.DiscardHandler),
	}, b, fx.store)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	const scope = "storage-scope"
	scripts := filepath.Join(w.cfg.ScriptsDir, scope)
	mirror := filepath.Join(scripts, "files", "kept.py")
	if err := os.MkdirAll(filepath.Dir(mirror), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mirror, []byte("print('kept')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(b.Conn())
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := js.ObjectStore(ctx, wire.BlobsBucket)
	if err != nil {
		t.Fatal(err)
	}

	// The job checks that its script is there while it runs.
	check := "import os\nprint(os.path.isfile(__file__), os.path.dirname(__file__))\n"
	codes := []string{check, check + "1/0\n", check + "#" + strings.Repeat("x", 2<<20) + "\n", check}
	for i, code := range codes {
		job := &wire.Job{
			ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: scope,
			Code: code, Filename: "main.py", TimeoutMS: 30000, Deadline: time.Now().Add(time.Minute).UTC(),
		}
		if err := b.PublishJob(ctx, job); err != nil {
			t.Fatal(err)
		}
		res, err := b.WaitResult(ctx, job.ID)
		if err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
		if want := "True " + scripts + "\n"; res.Stdout != want {
			t.Fatalf("job %d: %s %q %s: want stdout %q", i, res.Status, res.Stdout, res.Stderr, want)
		}
		if res.ScriptPath == "" || filepath.Dir(res.ScriptPath) != scripts {
			t.Errorf("job %d: script path %q, want one in %s", i, res.ScriptPath, scripts)
		}
		if i == 1 && !strings.Contains(res.Stderr, res.ScriptPath) {
			t.Errorf("job %d: the traceback does not name the script %s: %q", i, res.ScriptPath, res.Stderr)
		}
		// The result is stored after the script is removed.
		entries, err := os.ReadDir(scripts)
		if err != nil {
			t.Fatal(err)
		}
		free := 0
		for _, e := range entries {
			switch fi, err := e.Info(); {
			case e.Name() == "files":
			case strings.HasPrefix(e.Name(), ".free-") && err == nil && fi.Mode().IsRegular() && fi.Size() == 0:
				free++ // an emptied script, kept for the session's next job
			default:
				t.Errorf("job %d: left %s in the session's scripts directory", i, e.Name())
			}
		}
		if free > 1 {
			t.Errorf("job %d: %d free scripts after one job at a time: each job should reuse the last one's", i, free)
		}
		if job.CodeRef == "" {
			continue
		}
		// The code blob goes when the job is acked, just after its result
		// is stored.
		for {
			_, err := blobs.GetInfo(ctx, job.CodeRef)
			if errors.Is(err, jetstream.ErrObjectNotFound) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-ctx.Done():
				t.Fatalf("job %d: code blob %s still stored after the job was done", i, job.CodeRef)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if got, err := os.ReadFile(mirror); err != nil || string(got) != "print('kept')\n" {
		t.Errorf("the session's code-file mirror: %q %v", got, err)
	}
}
