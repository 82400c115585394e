package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/wire"
)

// startContextWorker starts a worker (sandboxed where the machine allows)
// with cfg's context settings.
func startContextWorker(t *testing.T, fx *lifecycleFixture, id string, maxContexts int, idle time.Duration, opts ...func(*Config)) *Worker {
	t.Helper()
	cfg := Config{
		ID: id, DataDir: filepath.Join(fx.dataDir, id), Sandbox: testSandbox(t),
		UIDDir: filepath.Join(fx.dataDir, "uids"), Concurrency: 1, Pythons: []string{},
		MaxContexts: maxContexts, ContextIdle: idle, Logger: slog.New(slog.DiscardHandler),
	}
	for _, o := range opts {
		o(&cfg)
	}
	w, err := New(cfg, fx.broker, fx.store)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w
}

// ctxCall sends one context request to worker w and returns its reply.
func ctxCall(t *testing.T, b *broker.Broker, w *Worker, req wire.ContextRequest) *wire.ContextReply {
	t.Helper()
	req.V = wire.Version
	if req.Scope == "" {
		req.Scope = "s1"
	}
	data, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := b.RequestContext(ctx, w.cfg.Pool, w.ID(), data)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Op, req.ID, err)
	}
	var reply wire.ContextReply
	if err := json.Unmarshal(out, &reply); err != nil || reply.Result == nil {
		t.Fatalf("%s %s: undecodable reply %q: %v", req.Op, req.ID, out, err)
	}
	return &reply
}

func mustCreate(t *testing.T, b *broker.Broker, w *Worker, scope, id string) {
	t.Helper()
	r := ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextCreate, Scope: scope, ID: id})
	if r.Result.Status != wire.StatusOK {
		t.Fatalf("create %s: %+v", id, r.Result)
	}
}

func runIn(t *testing.T, b *broker.Broker, w *Worker, scope, id, code string, timeout time.Duration) *wire.ContextReply {
	t.Helper()
	return ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextRun, Scope: scope, ID: id, Code: code, TimeoutMS: timeout.Milliseconds()})
}

// A context keeps its variables between calls, in its session's working
// directory; a timeout interrupts the code and the context goes on; another
// scope gets exactly the answer of a context that never existed; a reset
// empties it; a closed one says so.
func TestWorkerContext(t *testing.T) {
	fx := newLifecycleFixture(t)
	w := startContextWorker(t, fx, "ctx-a", 0, 0)
	b := fx.broker
	mustCreate(t, b, w, "s1", "c1")
	runIn(t, b, w, "s1", "c1", "x = 41\nopen('f.txt', 'w').write('hi')", time.Minute)
	if r := runIn(t, b, w, "s1", "c1", "x += 1; x", time.Minute); r.Result.Status != wire.StatusOK || r.Result.Stdout != "42\n" {
		t.Fatalf("x += 1; x: %+v", r.Result)
	}
	r := runIn(t, b, w, "s1", "c1", "import time\nprint('a', flush=True)\ntime.sleep(30)", 300*time.Millisecond)
	if r.Result.Status != wire.StatusTimeout || r.Ended != "" || !strings.Contains(r.Result.Message, "kept") || r.Result.Stdout != "a\n" {
		t.Fatalf("timeout: %+v (ended %q)", r.Result, r.Ended)
	}
	if r := runIn(t, b, w, "s1", "c1", "(x, open('f.txt').read())", time.Minute); r.Result.Stdout != "(42, 'hi')\n" {
		t.Fatalf("after the timeout: %+v", r.Result)
	}
	r = runIn(t, b, w, "s1", "c1", "1/0", time.Minute)
	if r.Result.Status != wire.StatusError || r.Result.Message != "ZeroDivisionError: division by zero" || !strings.Contains(r.Result.Stderr, "Traceback") {
		t.Fatalf("raise: %+v", r.Result)
	}
	other := runIn(t, b, w, "s2", "c1", "x", time.Minute)
	never := runIn(t, b, w, "s2", "c9", "x", time.Minute)
	if !other.Unknown || other.Result.Message != strings.Replace(never.Result.Message, "c9", "c1", 1) || other.Result.Stdout != "" {
		t.Fatalf("another scope: %+v, want it told as a context that never was: %+v", other.Result, never.Result)
	}
	// A reset says so: it answered "context c1 created", which a model took
	// for a second context beside the first.
	if r := ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextReset, Scope: "s1", ID: "c1"}); r.Result.Status != wire.StatusOK ||
		!strings.HasPrefix(r.Result.Message, "context c1 reset") || !strings.Contains(r.Result.Message, "variables are gone") {
		t.Fatalf("reset: %+v, want a message that says the context was reset and its variables are gone", r.Result)
	}
	if r := runIn(t, b, w, "s1", "c1", "'x' in dir()", time.Minute); r.Result.Stdout != "False\n" {
		t.Fatalf("after reset: %+v", r.Result)
	}
	if r := ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextClose, Scope: "s1", ID: "c1"}); r.Result.Status != wire.StatusOK {
		t.Fatalf("close: %+v", r.Result)
	}
	if r := runIn(t, b, w, "s1", "c1", "1", time.Minute); r.Ended != "closed" || r.Result.Status != wire.StatusError {
		t.Fatalf("after close: %+v (ended %q)", r.Result, r.Ended)
	}
	// On the same worker (a worker's start is most of a test's time):
	t.Run("killed after the grace", func(t *testing.T) { contextKilledAfterGrace(t, b, w) })
	t.Run("died between calls", func(t *testing.T) { contextDiedBetweenCalls(t, b, w) })
	t.Run("interrupt", func(t *testing.T) { contextInterrupt(t, b, w) })
	t.Run("run past its caller's deadline", func(t *testing.T) { contextRunPastDeadline(t, b, w) })
	t.Run("interrupt of a waiting call", func(t *testing.T) { contextInterruptWaitingCall(t, b, w) })
	t.Run("forgotten context made anew", func(t *testing.T) { contextForgottenMadeAnew(t, b, w) })
	t.Run("reset past its caller's deadline", func(t *testing.T) { contextResetPastDeadline(t, b, w) })
	t.Run("idle between calls", func(t *testing.T) { contextIdleBetweenCalls(t, b, w) })
}

// Between calls a context's cgroup has the least CPU weight, so that what
// its code left running takes only CPU no job wants; during a call it has
// every job's weight.
func contextIdleBetweenCalls(t *testing.T, b *broker.Broker, w *Worker) {
	mustCreate(t, b, w, "s1", "weight")
	w.contexts.mu.Lock()
	c := w.contexts.live[contextKey("s1", "weight")]
	w.contexts.mu.Unlock()
	if c == nil || c.jl == nil || c.jl.group == nil || !w.cgroups.CPU() {
		if os.Getenv("CI") == "true" {
			t.Fatal("no job cgroup with the cpu controller for the context")
		}
		t.Skip("no job cgroups with the cpu controller here")
	}
	idle, busy := "2", "1024"
	if w.cgroups.Version() == 2 {
		idle, busy = "1", "100"
	}
	weight := func() string {
		v, err := c.jl.group.CPUWeight()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := weight(); v != idle {
		t.Fatalf("CPU weight after create = %s, want %s", v, idle)
	}
	// A background loop, left running: the call's weight is seen while a
	// cell runs, and the idle one once it has answered.
	runIn(t, b, w, "s1", "weight", "import threading\ndef spin():\n    while True:\n        pass\nthreading.Thread(target=spin, daemon=True).start()", time.Minute)
	if v := weight(); v != idle {
		t.Fatalf("CPU weight between calls = %s, want %s", v, idle)
	}
	done := make(chan *wire.ContextReply, 1)
	go func() { done <- runIn(t, b, w, "s1", "weight", "import time\ntime.sleep(60)", 5*time.Second) }()
	seen := false
	for running := true; running && !seen; {
		select {
		case r := <-done:
			done <- r
			running = false
		case <-time.After(20 * time.Millisecond):
			seen = weight() == busy
		}
	}
	if r := <-done; r.Result.Status != wire.StatusTimeout {
		t.Fatalf("the sleeping cell: %+v", r.Result)
	}
	if !seen {
		t.Fatalf("CPU weight never %s while a cell ran", busy)
	}
	if v := weight(); v != idle {
		t.Fatalf("CPU weight after the call = %s, want %s", v, idle)
	}
}

// A cell that ignores its KeyboardInterrupt is killed after the grace: the
// context ends, and that call and the next say so.
func contextKilledAfterGrace(t *testing.T, b *broker.Broker, w *Worker) {
	mustCreate(t, b, w, "s1", "grace")
	code := "import time\nwhile True:\n    try:\n        time.sleep(30)\n    except KeyboardInterrupt:\n        pass\n"
	r := runIn(t, b, w, "s1", "grace", code, 200*time.Millisecond)
	if r.Result.Status != wire.StatusTimeout || r.Ended == "" || !strings.Contains(r.Result.Message, "variables are lost") {
		t.Fatalf("ignored interrupt: %+v (ended %q)", r.Result, r.Ended)
	}
	if r2 := runIn(t, b, w, "s1", "grace", "1", time.Minute); r2.Ended != r.Ended {
		t.Fatalf("next call: %+v (ended %q), want ended %q", r2.Result, r2.Ended, r.Ended)
	}
}

// The worker holds at most MaxContexts: the least recently used makes room
// and its next call is told; one idle past ContextIdle ends, and is told.
func TestWorkerContextEvictionAndIdle(t *testing.T) {
	fx := newLifecycleFixture(t)
	w := startContextWorker(t, fx, "ctx-c", 2, time.Hour)
	b := fx.broker
	mustCreate(t, b, w, "s1", "old")
	mustCreate(t, b, w, "s1", "mid")
	runIn(t, b, w, "s1", "old", "1", time.Minute) // now mid is the least recently used
	mustCreate(t, b, w, "s1", "new")
	if r := runIn(t, b, w, "s1", "mid", "1", time.Minute); !strings.Contains(r.Ended, "evicted") || !strings.Contains(r.Result.Message, "evicted") {
		t.Fatalf("evicted context: %+v (ended %q)", r.Result, r.Ended)
	}
	if r := runIn(t, b, w, "s1", "old", "1", time.Minute); r.Result.Status != wire.StatusOK {
		t.Fatalf("kept context: %+v", r.Result)
	}

	w2 := startContextWorker(t, fx, "ctx-d", 0, 50*time.Millisecond)
	mustCreate(t, b, w2, "s1", "c1")
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := runIn(t, b, w2, "s1", "c1", "1", time.Minute)
		if strings.Contains(r.Ended, "idle") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an idle context did not end: %+v", r.Result)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Idle contexts keep their memory without a job slot: the sum of their
// memory limits stays within ContextMemory. A new context past it ends the
// least recently used idle one, whose next call is told why; one whose
// own limit is past it is refused.
func TestWorkerContextMemoryBudget(t *testing.T) {
	fx := newLifecycleFixture(t)
	w := startContextWorker(t, fx, "ctx-m", 0, time.Hour, func(c *Config) { c.ContextMemory = 600 << 20 })
	b := fx.broker
	create := func(id string, mb int64) *wire.ContextReply {
		return ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextCreate, Scope: "s1", ID: id, Limits: &wire.Limits{MemoryMB: mb}})
	}
	for _, id := range []string{"old", "mid"} {
		if r := create(id, 256); r.Result.Status != wire.StatusOK {
			t.Fatalf("create %s: %+v", id, r.Result)
		}
	}
	runIn(t, b, w, "s1", "old", "x = 1", time.Minute) // now mid is the least recently used
	if r := create("new", 256); r.Result.Status != wire.StatusOK {
		t.Fatalf("create new: %+v", r.Result)
	}
	r := runIn(t, b, w, "s1", "mid", "1", time.Minute)
	if !strings.Contains(r.Ended, "evicted") || !strings.Contains(r.Ended, "memory") {
		t.Fatalf("the least recently used past the memory budget: %+v (ended %q)", r.Result, r.Ended)
	}
	if r := runIn(t, b, w, "s1", "old", "print(x)", time.Minute); r.Result.Status != wire.StatusOK || r.Result.Stdout != "1\n" {
		t.Fatalf("kept context: %+v", r.Result)
	}
	if r := create("huge", 700); r.Result.Status != wire.StatusLimit || !strings.Contains(r.Result.Message, "--context-memory") {
		t.Fatalf("a context past the whole budget: %+v", r.Result)
	}
	if r := runIn(t, b, w, "s1", "new", "1", time.Minute); r.Result.Status != wire.StatusOK {
		t.Fatalf("a refused context ended another: %+v", r.Result)
	}
}

// A worker that stops while a cell runs interrupts it, ends the context
// and tells the call so; its Stop does not wait for the cell's timeout.
// Then nothing answers on its subject.
func TestWorkerContextStopMidCall(t *testing.T) {
	fx := newLifecycleFixture(t)
	w := startContextWorker(t, fx, "ctx-f", 0, 0)
	mustCreate(t, fx.broker, w, "s1", "c1")
	replies := make(chan *wire.ContextReply, 1)
	go func() {
		data, _ := json.Marshal(wire.ContextRequest{V: wire.Version, Op: wire.ContextRun, Scope: "s1", ID: "c1",
			Code: "import time\ntime.sleep(300)", TimeoutMS: 600_000})
		out, err := fx.broker.RequestContext(context.Background(), w.cfg.Pool, w.ID(), data)
		var r wire.ContextReply
		if err != nil || json.Unmarshal(out, &r) != nil || r.Result == nil {
			t.Errorf("the running call: %v %q", err, out)
			replies <- nil
			return
		}
		replies <- &r
	}()
	time.Sleep(time.Second) // the cell is running (a wait, not a measure)
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := <-replies; r != nil && r.Ended != "the worker that held it stopped" {
		t.Fatalf("the running call: %+v (ended %q)", r.Result, r.Ended)
	}
	// A worker that is gone answers nothing: the request fails with
	// ErrNoResponder, which the frontend turns into "lost".
	data, _ := json.Marshal(wire.ContextRequest{V: wire.Version, Op: wire.ContextRun, Scope: "s1", ID: "c1", Code: "1"})
	if _, err := fx.broker.RequestContext(context.Background(), w.cfg.Pool, w.ID(), data); !errors.Is(err, broker.ErrNoResponder) {
		t.Fatalf("request to a stopped worker: %v, want ErrNoResponder", err)
	}
}

// A context whose process died between calls is lost, and the next call
// says so before anything runs.
func contextDiedBetweenCalls(t *testing.T, b *broker.Broker, w *Worker) {
	mustCreate(t, b, w, "s1", "died")
	runIn(t, b, w, "s1", "died", "import os, signal, threading, time\n"+
		"threading.Thread(target=lambda: (time.sleep(0.2), os.kill(os.getpid(), signal.SIGKILL))).start()", time.Minute)
	time.Sleep(time.Second) // the thread has killed its process (a wait, not a measure)
	r := runIn(t, b, w, "s1", "died", "print('ran')", time.Minute)
	if !r.EndedBefore || !strings.Contains(r.Ended, "killed") || r.Result.Stdout != "" {
		t.Fatalf("after the process died: %+v (ended %q, before %v)", r.Result, r.Ended, r.EndedBefore)
	}
}

// An interrupt request (the caller went away) stops the code that runs, as
// its timeout would, and the context goes on.
func contextInterrupt(t *testing.T, b *broker.Broker, w *Worker) {
	mustCreate(t, b, w, "s1", "intr")
	runIn(t, b, w, "s1", "intr", "kept = 7", time.Minute)
	replies := make(chan *wire.ContextReply, 1)
	go func() {
		data, _ := json.Marshal(wire.ContextRequest{V: wire.Version, Op: wire.ContextRun, Scope: "s1", ID: "intr",
			Code: "import time\ntime.sleep(300)", TimeoutMS: 600_000})
		out, err := b.RequestContext(context.Background(), w.cfg.Pool, w.ID(), data)
		var r wire.ContextReply
		if err != nil || json.Unmarshal(out, &r) != nil || r.Result == nil {
			t.Errorf("the running call: %v %q", err, out)
		}
		replies <- &r
	}()
	var r *wire.ContextReply
	for r == nil {
		ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextInterrupt, Scope: "s1", ID: "intr"})
		select {
		case r = <-replies:
		case <-time.After(200 * time.Millisecond):
		}
	}
	if r.Result == nil || r.Ended != "" || !strings.Contains(r.Result.Message, "cancelled by the caller") || !strings.Contains(r.Result.Stderr, "KeyboardInterrupt") {
		t.Fatalf("the interrupted call: %+v (ended %q)", r.Result, r.Ended)
	}
	if r := runIn(t, b, w, "s1", "intr", "kept", time.Minute); r.Result.Stdout != "7\n" {
		t.Fatalf("after the interrupt: %+v", r.Result)
	}
}

// A run whose caller will have stopped waiting before it could answer (it
// waited behind another call, or on a worker stopped past the caller's
// patience) does not start: its caller was told that no answer came, and
// may send the code again. Before, it ran all the same: through a cluster,
// a call told "worker did not answer within 31s; try again" after waiting
// behind a 45 s call wrote its file once that call ended.
func contextRunPastDeadline(t *testing.T, b *broker.Broker, w *Worker) {
	mustCreate(t, b, w, "s1", "late")
	r := ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextRun, Scope: "s1", ID: "late", Call: "c1",
		Code: "open('late.txt', 'a').write('x')", TimeoutMS: 1000, Deadline: time.Now().Add(2 * time.Second)})
	if r.Result.Status != wire.StatusExpired || r.Ended != "" || !strings.Contains(r.Result.Message, "nothing ran") {
		t.Errorf("a run that cannot answer before its deadline: %+v (ended %q), want expired, nothing run", r.Result, r.Ended)
	}
	r = ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextRun, Scope: "s1", ID: "late", Call: "c2",
		Code: "import os\nos.path.exists('late.txt')", TimeoutMS: 10_000, Deadline: time.Now().Add(time.Minute)})
	if r.Result.Status != wire.StatusOK || r.Result.Stdout != "False\n" {
		t.Fatalf("the next run, in time: %+v; want it run, and no file of the expired one", r.Result)
	}
}

// An interrupt names the call whose caller went away: a call waiting behind
// another is not run, and the other, running, is left alone. Before, the
// interrupt stopped whatever ran (the other caller's code) and the
// abandoned call ran after it.
func contextInterruptWaitingCall(t *testing.T, b *broker.Broker, w *Worker) {
	mustCreate(t, b, w, "s1", "wait")
	send := func(call, code string) <-chan *wire.ContextReply {
		ch := make(chan *wire.ContextReply, 1)
		go func() {
			data, _ := json.Marshal(wire.ContextRequest{V: wire.Version, Op: wire.ContextRun, Scope: "s1", ID: "wait",
				Call: call, Code: code, TimeoutMS: 60_000, Deadline: time.Now().Add(2 * time.Minute)})
			out, err := b.RequestContext(context.Background(), w.cfg.Pool, w.ID(), data)
			var r wire.ContextReply
			if err != nil || json.Unmarshal(out, &r) != nil || r.Result == nil {
				t.Errorf("call %s: %v %q", call, err, out)
			}
			ch <- &r
		}()
		return ch
	}
	running := func() bool {
		w.contexts.mu.Lock()
		defer w.contexts.mu.Unlock()
		c := w.contexts.live[contextKey("s1", "wait")]
		return c != nil && c.stopCall != nil
	}
	first := send("first", "import time\ntime.sleep(3)\nfirst_done = True")
	for !running() {
		time.Sleep(10 * time.Millisecond)
	}
	second := send("second", "open('second.txt', 'w').write('ran')")
	ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextInterrupt, Scope: "s1", ID: "wait", Call: "second"})
	if r := <-first; r.Result.Status != wire.StatusOK || r.Ended != "" {
		t.Errorf("the running call, not the one interrupted: %+v (ended %q), want it to run to its end", r.Result, r.Ended)
	}
	if r := <-second; r.Result.Status != wire.StatusCancelled || !strings.Contains(r.Result.Message, "nothing ran") {
		t.Errorf("the interrupted call, waiting: %+v, want cancelled, nothing run", r.Result)
	}
	r := runIn(t, b, w, "s1", "wait", "import os\n('first_done' in dir(), os.path.exists('second.txt'))", time.Minute)
	if r.Result.Stdout != "(True, False)\n" {
		t.Fatalf("after both: %+v; want the first call's variable and no file of the interrupted one", r.Result)
	}
}

// A context the frontend forgot (declared lost while its worker was stopped
// past its presence record; the caller told its variables are gone) gives
// way to a new one of its name on the worker that still holds it; one the
// state store records on this worker does not. Before, every create of the
// name failed with "exists already" until the forgotten one was idle for
// --context-idle, while list_contexts showed none.
func contextForgottenMadeAnew(t *testing.T, b *broker.Broker, w *Worker) {
	mustCreate(t, b, w, "s1", "forgot")
	runIn(t, b, w, "s1", "forgot", "x = 1", time.Minute)
	// No record of it in the state store: as after the frontend said it was lost.
	r := ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextCreate, Scope: "s1", ID: "forgot"})
	if r.Result.Status != wire.StatusOK {
		t.Fatalf("create of a forgotten context's name: %+v, want a new context", r.Result)
	}
	if r := runIn(t, b, w, "s1", "forgot", "'x' in dir()", time.Minute); r.Result.Stdout != "False\n" {
		t.Fatalf("the new context: %+v, want none of the forgotten one's variables", r.Result)
	}
	rec, _ := json.Marshal(wire.ContextRecord{V: wire.Version, Worker: w.ID(), EnvID: "default", CreatedAt: time.Now()})
	if err := w.store.HSet(t.Context(), w.cfg.Keys.Contexts("s1"), "forgot", rec); err != nil {
		t.Fatal(err)
	}
	r = ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextCreate, Scope: "s1", ID: "forgot"})
	if r.Result.Status != wire.StatusLimit || !strings.Contains(r.Result.Message, "exists already") {
		t.Fatalf("create of a recorded context's name: %+v, want it refused", r.Result)
	}
}

// A reset that comes to the context after its caller stopped waiting (it
// waited behind a long call) does nothing: its caller was told that no
// answer came. Before, it ended the context, its variables gone.
func contextResetPastDeadline(t *testing.T, b *broker.Broker, w *Worker) {
	mustCreate(t, b, w, "s1", "reset-late")
	runIn(t, b, w, "s1", "reset-late", "kept = 7", time.Minute)
	r := ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextReset, Scope: "s1", ID: "reset-late", Deadline: time.Now().Add(-time.Second)})
	if r.Result.Status != wire.StatusExpired || r.Ended != "" {
		t.Errorf("a reset past its deadline: %+v (ended %q), want expired, nothing done", r.Result, r.Ended)
	}
	if r := runIn(t, b, w, "s1", "reset-late", "kept", time.Minute); r.Result.Stdout != "7\n" {
		t.Fatalf("after the late reset: %+v (ended %q), want the context and its variables", r.Result, r.Ended)
	}
}

// One tenant making contexts past the worker's limit ends its own, not
// another tenant's: before, plain least-recently-used order let it end
// every other tenant's context on the worker, one create each.
func TestWorkerContextEvictionTakesFromWhoHoldsMost(t *testing.T) {
	fx := newLifecycleFixture(t)
	w := startContextWorker(t, fx, "ctx-e", 3, time.Hour)
	b := fx.broker
	create := func(tenant, scope, id string) {
		t.Helper()
		r := ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextCreate, Tenant: tenant, Scope: scope, ID: id})
		if r.Result.Status != wire.StatusOK {
			t.Fatalf("create %s: %+v", id, r.Result)
		}
	}
	create("bob-co", "sb", "b1") // the least recently used from here on
	create("alice-co", "sa", "a1")
	create("alice-co", "sa", "a2")
	create("alice-co", "sa", "a3")
	if r := runIn(t, b, w, "sb", "b1", "1", time.Minute); r.Result.Status != wire.StatusOK {
		t.Fatalf("bob's context after alice's creates: %+v (ended %q)", r.Result, r.Ended)
	}
	if r := runIn(t, b, w, "sa", "a1", "1", time.Minute); !strings.Contains(r.Ended, "evicted") {
		t.Fatalf("alice's least recently used: %+v (ended %q), want evicted", r.Result, r.Ended)
	}
}

// A context whose disk limit is measured (no session file system) is held
// to it between calls too: what it left running (a thread here) wrote past
// it once no call's watch measured the directory, and a context at
// disk_mb=20 filled the host's disk. Now the context ends, its next call
// says why, and what it wrote goes. A call that passes the limit (a
// fallocate far past it between two samples) is interrupted, and what it
// wrote goes too; the context is kept.
func TestWorkerContextDiskLimitBetweenCalls(t *testing.T) {
	const limit = 20 << 20
	fx := newLifecycleFixture(t)
	w := startContextWorker(t, fx, "ctx-d", 0, time.Hour, func(c *Config) { c.SessionFS = SessionFSOff })
	b := fx.broker
	create := func(id string) {
		r := ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextCreate, Scope: "s1", ID: id, Limits: &wire.Limits{DiskMB: limit >> 20}})
		if r.Result.Status != wire.StatusOK {
			t.Fatalf("create %s: %+v", id, r.Result)
		}
	}

	create("bg")
	if r := runIn(t, b, w, "s1", "bg", "open('kept.txt', 'w').write('before')", time.Minute); r.Result.Status != wire.StatusOK {
		t.Fatalf("first call: %+v", r.Result)
	}
	time.Sleep(100 * time.Millisecond) // file times are a tick coarse: kept.txt is older than the next call
	r := runIn(t, b, w, "s1", "bg", `import os, threading, time
def fill():
    time.sleep(0.3)
    for i in range(40):
        fd = os.open('bg%d' % i, os.O_CREAT | os.O_WRONLY, 0o600)
        os.posix_fallocate(fd, 0, 10 << 20)
        os.close(fd)
        time.sleep(0.05)
threading.Thread(target=fill, daemon=True).start()
`, time.Minute)
	if r.Result.Status != wire.StatusOK {
		t.Fatalf("the call that leaves a writer: %+v", r.Result)
	}
	dir := sessionWork(w, "s1")
	peak := int64(0)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		peak = max(peak, DiskUsage(dir))
	}
	if du := DiskUsage(dir); du > limit {
		t.Errorf("the working directory takes %d MiB after the context's thread wrote between calls (peak %d MiB), over its %d MiB limit",
			du>>20, peak>>20, limit>>20)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "kept.txt")); err != nil || string(got) != "before" {
		t.Errorf("a file of an earlier call: %q, %v", got, err)
	}
	r = runIn(t, b, w, "s1", "bg", "print('ran')", time.Minute)
	if !r.EndedBefore || !strings.Contains(r.Ended, "disk limit") || r.Result.Stdout != "" {
		t.Errorf("the call after: %+v (ended %q, before %v), want it told the context ended on its disk limit", r.Result, r.Ended, r.EndedBefore)
	}

	create("call")
	r = runIn(t, b, w, "s1", "call", "x = 5\n"+fallocateAttack, time.Minute)
	if r.Result.Status != wire.StatusLimit || r.Result.Limit != wire.LimitDisk || r.Ended != "" {
		t.Fatalf("a call past the limit: %+v (ended %q)", r.Result, r.Ended)
	}
	if du := DiskUsage(dir); du > limit {
		t.Errorf("the working directory takes %d MiB after a call past the limit, over its %d MiB limit (%s)", du>>20, limit>>20, r.Result.Message)
	}
	if r := runIn(t, b, w, "s1", "call", "print(x)", time.Minute); r.Result.Status != wire.StatusOK || r.Result.Stdout != "5\n" {
		t.Errorf("the context after a call past its limit: %+v (ended %q)", r.Result, r.Ended)
	}
}

// A cell's answer larger than one message of the broker (1 MiB of control
// characters on each stream is 12 MiB as JSON, over the 8 MiB an embedded
// server takes) arrives, its output cut to fit and saying so: it was never
// delivered, and the caller waited for the call's timeout and 30 s more to
// be told the worker did not answer.
func TestWorkerContextAnswerFitsOneMessage(t *testing.T) {
	fx := newLifecycleFixture(t)
	w := startContextWorker(t, fx, "ctx-o", 0, time.Hour)
	b := fx.broker
	mustCreate(t, b, w, "s1", "big")
	data, _ := json.Marshal(wire.ContextRequest{V: wire.Version, Op: wire.ContextRun, Scope: "s1", ID: "big", TimeoutMS: 60_000,
		Code: "import sys\nsys.stdout.write('\\x01' * (1 << 20))\nsys.stderr.write('\\x01' * (1 << 20))\nx = 3"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := b.RequestContext(ctx, w.cfg.Pool, w.ID(), data)
	if err != nil {
		t.Fatalf("a call whose output is larger than a message: %v", err)
	}
	if len(out) > b.MessageLimit() {
		t.Errorf("the answer is %d bytes, over the message limit %d", len(out), b.MessageLimit())
	}
	var r wire.ContextReply
	if err := json.Unmarshal(out, &r); err != nil || r.Result == nil {
		t.Fatalf("undecodable answer: %v", err)
	}
	if r.Result.Status != wire.StatusOK || !r.Result.StdoutTruncated || !strings.Contains(r.Result.Stdout, "bytes of stdout dropped here") ||
		r.Result.Limit != wire.LimitOutput {
		t.Errorf("the answer: status %s, limit %q, stdout truncated %v, stdout %d bytes ending %q", r.Result.Status, r.Result.Limit,
			r.Result.StdoutTruncated, len(r.Result.Stdout), r.Result.Stdout[max(0, len(r.Result.Stdout)-200):])
	}
	if r := runIn(t, b, w, "s1", "big", "print(x)", time.Minute); r.Result.Status != wire.StatusOK || r.Result.Stdout != "3\n" {
		t.Errorf("the context after: %+v", r.Result)
	}
}
