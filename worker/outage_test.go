package worker

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/statestore/redistest"
	"github.com/codexec/codexec/wire"
)

// msgHandler is a slog handler that sends every record's message on a
// channel (dropping them when nobody reads).
type msgHandler struct{ msgs chan string }

func (h msgHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h msgHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.msgs <- r.Message:
	default:
	}
	return nil
}
func (h msgHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h msgHandler) WithGroup(string) slog.Handler      { return h }

// A worker whose state store goes away keeps running the jobs of its
// queue (their claims are made in JetStream; the Claimants record waits
// for the store: claim.go), and once the store is back announces itself
// again at once, rather than a whole heartbeat interval after its last
// failed renewal (Redis outages longer than the presence records' life
// used to leave frontends without any live worker until then).
func TestWorkerThroughStoreOutage(t *testing.T) {
	fx := newLifecycleFixture(t)
	rs := redistest.Start(t)
	st, err := statestore.NewRedis(t.Context(), statestore.RedisOptions{URL: rs.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	b := brokertest.Open(t, fx.nats, broker.Config{})
	logs := msgHandler{msgs: make(chan string, 1024)}
	const interval = 6 * time.Second
	w, err := New(Config{
		ID: "outage", DataDir: fx.dataDir, ExecMode: ExecSpawn, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		Concurrency: 1, Pythons: []string{}, HeartbeatInterval: interval, Logger: slog.New(logs),
	}, b, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	rs.Stop()
	waitMsg(t, ctx, logs.msgs, "heartbeat failed")
	// Jobs still reach the worker through the queue, and run (here: a
	// session the frontend knew to have no files, see
	// TestWorkspaceWhileStoreIsDown).
	job := &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: "outage",
		Code: "print('still here')", TimeoutMS: 30000, Deadline: time.Now().Add(time.Minute).UTC(), KnownHolder: wire.NoHolder}
	if err := b.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	// Well before the test's end, so that a job held until the store is
	// back fails here rather than hanging.
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	res, err := b.WaitResult(dctx, job.ID)
	if err != nil || res.Status != wire.StatusOK || res.Stdout != "still here\n" {
		t.Fatalf("a job while the store is down: %+v %v", res, err)
	}

	// The store comes back without the record (it expired meanwhile).
	rs.Restart(t)
	if err := st.Leave(ctx, w.cfg.Keys.Workers(), w.ID()); err != nil {
		t.Fatal(err)
	}
	// Before the next regular heartbeat (interval after the failed one).
	wctx, wcancel := context.WithTimeout(ctx, interval/2)
	defer wcancel()
	for {
		members, err := st.Members(wctx, w.cfg.Keys.Workers())
		if err == nil {
			if _, ok := members[w.ID()]; ok {
				break
			}
		}
		select {
		case <-wctx.Done():
			t.Fatalf("presence not back within %s of the store's return (heartbeat every %s)", interval/2, interval)
		case <-time.After(50 * time.Millisecond):
		}
	}
	waitMsg(t, ctx, logs.msgs, "heartbeat restored: presence announced again")
}

// waitMsg waits for a log record with message msg.
func waitMsg(t *testing.T, ctx context.Context, msgs <-chan string, msg string) {
	t.Helper()
	for {
		select {
		case m := <-msgs:
			if strings.HasPrefix(m, msg) {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no log %q", msg)
		}
	}
}

// While the state store is away, a worker runs a session's job only on a
// copy of its files it knows to be the newest: the holder's (the record
// last named it), or, for a session the frontend knew to have no files, a
// worker with no copy. Any other worker answers that nothing was run: run
// on its stale or empty copy, the job answered ok, and the copy saved first
// once the store was back replaced the other, losing what the other's jobs
// wrote. Once the store is back the holder's first job saves what the
// outage's jobs wrote; a copy with such changes that another worker's
// newer record replaces is stored aside first, and the call told.
func TestWorkspaceWhileStoreIsDown(t *testing.T) {
	e := brokertest.StartNATS(t)
	br := brokertest.Open(t, e, broker.Config{})
	ctx, srv, st := redisStore(t)
	log := slog.New(slog.DiscardHandler)
	type node struct {
		w   *Worker
		cwd map[string]string
	}
	nodes := map[string]*node{}
	for _, id := range []string{"wa", "wb", "wc"} {
		nodes[id] = &node{&Worker{cfg: Config{ID: id, DataDir: t.TempDir()}, broker: br, store: st}, map[string]string{}}
	}
	// job runs on worker id a job of scope that appends line to log.txt,
	// the frontend knowing holder known, and returns the file as the job
	// saw it after its append, with the save's note.
	job := func(id, scope, known, line string) (string, string, error) {
		t.Helper()
		n := nodes[id]
		if n.cwd[scope] == "" {
			n.cwd[scope] = t.TempDir()
		}
		cwd := n.cwd[scope]
		j, err := n.w.restoreWorkspace(ctx, scope, cwd, os.Getuid(), nil, 1<<20, known, log)
		if err != nil {
			return "", "", err
		}
		f, err := os.OpenFile(filepath.Join(cwd, "log.txt"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteString(line + "\n")
		_ = f.Close()
		data, _ := os.ReadFile(filepath.Join(cwd, "log.txt"))
		note := n.w.saveWorkspace(ctx, j, ulid.Make().String(), cwd, log)
		return string(data), note, nil
	}
	must := func(id, scope, known, line, want string) string {
		t.Helper()
		got, note, err := job(id, scope, known, line)
		if err != nil || got != want {
			t.Fatalf("%s on %s (holder known: %q): %q %v, want %q", line, id, known, got, err, want)
		}
		return note
	}
	must("wa", "s", "", "1", "1\n")
	must("wb", "s", "wa", "2", "1\n2\n") // restored from wa's snapshot: wb holds s now
	must("wa", "s", "wb", "3", "1\n2\n3\n")

	srv.Stop()
	if _, _, err := job("wb", "s", "wa", "x"); err == nil || !strings.Contains(err.Error(), "nothing was run") || !strings.Contains(err.Error(), "worker wa") {
		t.Fatalf("store down, a worker whose copy is stale: %v", err)
	}
	if _, _, err := job("wb", "s", "", "x"); err == nil {
		t.Fatal("store down, a worker whose copy is stale, the holder unknown: ran")
	}
	if _, _, err := job("wc", "s", "", "x"); err == nil {
		t.Fatal("store down, a worker without a copy, the holder unknown: ran")
	}
	if _, _, err := job("wc", "s", "wa", "x"); err == nil {
		t.Fatal("store down, a worker without a copy, the holder known: ran")
	}
	if note := must("wa", "s", "wa", "4", "1\n2\n3\n4\n"); !strings.Contains(note, "on worker wa only until the store is back") {
		t.Errorf("store down, the holder's save says nothing of where the files are: %q", note)
	}
	must("wa", "s", "", "5", "1\n2\n3\n4\n5\n") // a frontend that never saw s
	// A session without files: its first call runs on a worker without a
	// copy, which holds it from then on.
	must("wc", "new", wire.NoHolder, "n1", "n1\n")
	must("wc", "new", "wc", "n2", "n1\nn2\n")
	if _, _, err := job("wb", "new", "wc", "x"); err == nil {
		t.Fatal("store down, a new session's job on another worker: ran")
	}

	srv.Restart(t)
	for ctx.Err() == nil {
		if _, err := nodes["wa"].w.readWorkspace(ctx, "s"); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The holders' next jobs save what the outage's jobs wrote, and any
	// worker restores it.
	must("wa", "s", "wa", "6", "1\n2\n3\n4\n5\n6\n")
	must("wb", "s", "wa", "7", "1\n2\n3\n4\n5\n6\n7\n")
	must("wc", "new", "", "n3", "n1\nn2\nn3\n")
	must("wa", "new", "wc", "n4", "n1\nn2\nn3\nn4\n")

	// wb holds s; it runs a job while the store is away, then the store is
	// back and wa runs one of s (from the last record) before wb does:
	// wb's copy is replaced, but stored aside first, and its call told.
	srv.Stop()
	must("wb", "s", "wb", "8", "1\n2\n3\n4\n5\n6\n7\n8\n")
	srv.Restart(t)
	for ctx.Err() == nil {
		if _, err := nodes["wa"].w.readWorkspace(ctx, "s"); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	must("wa", "s", "wb", "9", "1\n2\n3\n4\n5\n6\n7\n9\n")
	_, note, err := job("wb", "s", "wa", "10")
	if err != nil || !strings.Contains(note, "were replaced by newer ones from worker wa") || !strings.Contains(note, "unsaved-") {
		t.Fatalf("a copy with unsaved changes replaced: note %q, %v", note, err)
	}
	name := note[strings.Index(note, "ws-s-unsaved-"):]
	name = name[:strings.IndexByte(name, ' ')]
	r, err := br.GetWorkspace(ctx, name)
	if err != nil {
		t.Fatalf("the copy stored aside: %v", err)
	}
	_ = r.Close()
}
