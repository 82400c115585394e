package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/statestore/redistest"
	"github.com/codexec/codexec/wire"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func job(pool string) *wire.Job {
	return &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: pool, Scope: "s", Code: "print(1)",
		Filename: "main.py", TimeoutMS: 5000, Deadline: time.Now().Add(time.Minute).UTC()}
}

// announce writes a presence record as a worker's heartbeat does.
func announce(t *testing.T, st statestore.Store, a envspec.Advert) {
	t.Helper()
	data, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Touch(testCtx(t), statestore.Keys{Prefix: statestore.DefaultPrefix}.Workers(), a.WorkerID, data, time.Minute); err != nil {
		t.Fatal(err)
	}
}

type fixture struct {
	src Sources
	b   *broker.Broker
}

// setup starts a real JetStream (in process) and a real redis-server.
func setup(t *testing.T) fixture {
	t.Helper()
	e := brokertest.StartNATS(t)
	b := brokertest.Open(t, e, broker.Config{})
	nc, err := nats.Connect(e.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	rs := redistest.Start(t)
	st, err := statestore.NewRedis(testCtx(t), statestore.RedisOptions{URL: rs.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return fixture{src: Sources{JetStream: js, Store: st}, b: b}
}

// Read counts each pool's waiting and handed-out jobs from the consumers'
// state and its workers from their presence records; Rates measures the
// jobs handed out between two reads.
func TestReadQueuesAndWorkers(t *testing.T) {
	t.Parallel()
	fx := setup(t)
	ctx := testCtx(t)
	started := time.Now().UTC().Add(-time.Minute)
	announce(t, fx.src.Store, envspec.Advert{V: wire.Version, WorkerID: "w1", Pool: "p1", Host: "h1", Concurrency: 2, Load: 1,
		Warm: 1, Envs: []string{"env-a"}, StartedAt: started, Capabilities: envspec.Capabilities{Labels: map[string]string{"gpu": "1"}}})
	announce(t, fx.src.Store, envspec.Advert{V: wire.Version, WorkerID: "w2", Pool: "p2", Concurrency: 4, StartedAt: started})

	// A consumer of p1 that runs one job at a time and holds it until
	// released: of three jobs, one is handed out and two wait.
	got := make(chan string, 3)
	release := make(chan struct{})
	c, err := fx.b.Consume(ctx, "p1", 1, func(_ context.Context, d *broker.Delivery) {
		got <- d.Job.ID
		<-release
		_ = d.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	for range 3 {
		if err := fx.b.PublishJob(ctx, job("p1")); err != nil {
			t.Fatal(err)
		}
	}
	<-got

	first, err := Read(ctx, fx.src)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Workers) != 2 || first.Workers[0].ID != "w1" || first.Workers[0].Warm != 1 ||
		first.Workers[0].Labels["gpu"] != "1" || len(first.Workers[0].Envs) != 1 || first.Workers[0].Load != 1 {
		t.Errorf("workers = %+v", first.Workers)
	}
	p1, p2 := poolNamed(t, first, "p1"), poolNamed(t, first, "p2")
	if p1.Workers != 1 || p1.Slots != 2 || p1.Load != 1 || p1.Queued != 2 || p1.InFlight != 1 || p1.Delivered != 1 {
		t.Errorf("p1 = %+v, want 1 worker, 2 slots, load 1, 2 queued, 1 in flight, 1 delivered", p1)
	}
	if p2.Workers != 1 || p2.Slots != 4 || p2.Queued != 0 || p2.Delivered != 0 {
		t.Errorf("p2 = %+v", p2)
	}
	if first.Published < 3 || p1.JobsPerSec != nil || first.PublishedPerSec != nil {
		t.Errorf("published %d (want at least 3), rates before a second read: %v %v", first.Published, p1.JobsPerSec, first.PublishedPerSec)
	}

	close(release)
	<-got
	<-got
	var second Snapshot
	for {
		if second, err = Read(ctx, fx.src); err != nil {
			t.Fatal(err)
		}
		if p := poolNamed(t, second, "p1"); p.Delivered == 3 && p.InFlight == 0 && p.Queued == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("p1 never drained: %+v", poolNamed(t, second, "p1"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	Rates(&first, &second)
	dt := second.At.Sub(first.At).Seconds()
	if r := poolNamed(t, second, "p1").JobsPerSec; r == nil || *r != 2/dt {
		t.Errorf("p1 jobs/s = %v, want 2 jobs over %.3fs", r, dt)
	}
	if r := poolNamed(t, second, "p2").JobsPerSec; r == nil || *r != 0 {
		t.Errorf("p2 jobs/s = %v, want 0", r)
	}
	if second.PublishedPerSec == nil {
		t.Error("no published rate on the second read")
	}

	only, err := Read(ctx, Sources{JetStream: fx.src.JetStream, Store: fx.src.Store, Pool: "p2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(only.Workers) != 1 || only.Workers[0].ID != "w2" || len(only.Pools) != 1 || only.Pools[0].Name != "p2" {
		t.Errorf("--pool p2: %+v", only)
	}
}

func poolNamed(t *testing.T, s Snapshot, name string) Pool {
	t.Helper()
	for _, p := range s.Pools {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no pool %s in %+v", name, s.Pools)
	return Pool{}
}

// A NATS where no codexec process has connected has no jobs stream: Read
// says so and creates nothing.
func TestReadWithoutStream(t *testing.T) {
	t.Parallel()
	e := brokertest.StartNATS(t)
	nc, err := nats.Connect(e.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	rs := redistest.Start(t)
	st, err := statestore.NewRedis(testCtx(t), statestore.RedisOptions{URL: rs.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	snap, err := Read(testCtx(t), Sources{JetStream: js, Store: st})
	if err != nil || !snap.NoStream || len(snap.Pools) != 0 || len(snap.Workers) != 0 {
		t.Fatalf("Read = %+v, %v", snap, err)
	}
	if _, err := js.Stream(testCtx(t), wire.JobsStream); err == nil {
		t.Error("Read created the jobs stream")
	}
	var out bytes.Buffer
	if err := Text(&out, snap); err != nil || !strings.Contains(out.String(), "no jobs stream yet") || !strings.Contains(out.String(), "no live worker") {
		t.Errorf("Text = %q, %v", out.String(), err)
	}
}

// frames returns a read function that serves snaps in turn and cancels
// the watch after the last.
func frames(cancel context.CancelFunc, snaps ...Snapshot) func(context.Context) (Snapshot, error) {
	i := 0
	return func(context.Context) (Snapshot, error) {
		s := snaps[min(i, len(snaps)-1)]
		i++
		if i >= len(snaps) {
			cancel()
		}
		return s, nil
	}
}

func snapAt(at time.Time, workers ...string) Snapshot {
	s := Snapshot{At: at, Pools: []Pool{{Name: "default", Workers: len(workers)}}}
	for _, w := range workers {
		s.Workers = append(s.Workers, Worker{ID: w, Pool: "default"})
	}
	return s
}

// On a terminal, Watch hides the cursor, clears the screen once, draws
// every frame from the top left clearing what the previous one left, and
// shows the cursor again; elsewhere it writes plain blocks, no escapes.
func TestWatchRedrawsOnTerminalOnly(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	snaps := []Snapshot{snapAt(at, "worker-long-name", "w2"), snapAt(at.Add(time.Second), "w2")}

	ctx, cancel := context.WithCancel(context.Background())
	var term bytes.Buffer
	if err := Watch(ctx, &term, frames(cancel, snaps...), Options{Terminal: true, Interval: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	out := term.String()
	if !strings.HasPrefix(out, ansiHideCursor+ansiClear+ansiHome) || !strings.HasSuffix(out, ansiClearBelow+ansiShowCursor) {
		t.Errorf("terminal output does not open and close the view: %q", out)
	}
	if n := strings.Count(out, ansiHome); n != 2 {
		t.Errorf("%d frames drawn from the top, want 2", n)
	}
	last := out[strings.LastIndex(out, ansiHome):]
	if strings.Contains(last, "worker-long-name") || !strings.Contains(last, "w2") || !strings.Contains(last, ansiClearLine+"\r\n") {
		t.Errorf("last frame = %q", last)
	}

	ctx, cancel = context.WithCancel(context.Background())
	var plain bytes.Buffer
	if err := Watch(ctx, &plain, frames(cancel, snaps...), Options{Interval: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.String(), "\x1b") || strings.Count(plain.String(), "codexec status at") != 2 {
		t.Errorf("plain output = %q", plain.String())
	}

	ctx, cancel = context.WithCancel(context.Background())
	var js bytes.Buffer
	if err := Watch(ctx, &js, frames(cancel, snaps...), Options{JSON: true, Terminal: true, Interval: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(js.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("JSON watch wrote %d lines: %q", len(lines), js.String())
	}
	var s Snapshot
	if err := json.Unmarshal([]byte(lines[1]), &s); err != nil || len(s.Workers) != 1 || s.Pools[0].JobsPerSec == nil {
		t.Errorf("second JSON line = %s (%v), want one worker and a rate", lines[1], err)
	}
}

// A read that fails shows its error in place of the tables, and the watch
// goes on: the next read is drawn again, its rates measured from the last
// read that worked.
func TestWatchShowsFailedRead(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	read := func(context.Context) (Snapshot, error) {
		calls++
		switch calls {
		case 1:
			return snapAt(at, "w1"), nil
		case 2:
			return Snapshot{}, errors.New("worker presence: connection refused")
		default:
			cancel()
			return snapAt(at.Add(2*time.Second), "w1"), nil
		}
	}
	var out bytes.Buffer
	if err := Watch(ctx, &out, read, Options{Interval: time.Millisecond}); err != nil {
		t.Fatalf("Watch = %v after a last read that worked", err)
	}
	blocks := strings.Split(out.String(), "codexec status at ")[1:]
	if len(blocks) != 3 || !strings.Contains(blocks[1], "connection refused") || strings.Contains(blocks[1], "WORKER") ||
		!strings.Contains(blocks[2], "w1") || !strings.Contains(blocks[2], "default  1        0/0         0       0          0.0") {
		t.Errorf("watch output:\n%s", out.String())
	}
}
