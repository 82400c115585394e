package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
	"github.com/codexec/codexec/wire"
)

// testTimeout bounds every test; it is far below any AckWait that a test
// relies on not expiring.
const testTimeout = 30 * time.Second

type testBundle struct {
	e  *broker.Embedded
	b  *broker.Broker
	js jetstream.JetStream
}

func setup(t *testing.T, ecfg broker.EmbeddedConfig, cfg broker.Config) *testBundle {
	t.Helper()
	e := brokertest.StartNATSWith(t, ecfg)
	b := brokertest.Open(t, e, cfg)
	js, err := jetstream.New(b.Conn())
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{e: e, b: b, js: js}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func newJob(code string) *wire.Job {
	return &wire.Job{
		ID:        ulid.Make().String(),
		Kind:      wire.KindExecute,
		Pool:      wire.DefaultPool,
		Scope:     "test-scope",
		Code:      code,
		Filename:  "main.py",
		TimeoutMS: 5000,
		Deadline:  time.Now().Add(time.Minute).UTC(),
	}
}

func newResult(jobID, stdout string) *wire.Result {
	now := time.Now().UTC().Truncate(time.Millisecond)
	return &wire.Result{
		JobID:      jobID,
		Status:     wire.StatusOK,
		Stdout:     stdout,
		WorkerID:   "w1",
		Attempt:    1,
		StartedAt:  now,
		FinishedAt: now,
	}
}

// stopConsumer stops c in t.Cleanup, cancelling handlers that outlive 10s.
func stopConsumer(t testing.TB, c *broker.Consumer) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
		<-c.Done()
	})
}

// consume starts a consumer of the default pool on b, which is stopped
// when t ends.
func consume(t testing.TB, ctx context.Context, b *broker.Broker, concurrency int, handle func(context.Context, *broker.Delivery)) *broker.Consumer {
	t.Helper()
	c, err := b.Consume(ctx, wire.DefaultPool, concurrency, handle)
	if err != nil {
		t.Fatal(err)
	}
	stopConsumer(t, c)
	return c
}

// ackIDs starts a consumer of the default pool on b that acks each job and
// sends its id on the channel it returns, which holds buffered ids.
func ackIDs(t testing.TB, ctx context.Context, b *broker.Broker, concurrency, buffered int) <-chan string {
	t.Helper()
	ids := make(chan string, buffered)
	consume(t, ctx, b, concurrency, func(ctx context.Context, d *broker.Delivery) {
		if err := d.Ack(); err != nil {
			t.Errorf("Ack: %v", err)
		}
		ids <- d.Job.ID
	})
	return ids
}

// requireRedelivered starts a consumer on b and checks that the first job
// it gets is the second delivery of job jobID.
func requireRedelivered(t testing.TB, ctx context.Context, b *broker.Broker, jobID string) {
	t.Helper()
	again := make(chan *broker.Delivery, 1)
	consume(t, ctx, b, 1, func(ctx context.Context, d *broker.Delivery) {
		again <- d
	})
	d := recv(t, ctx, again)
	if d.Job.ID != jobID || d.Attempt != 2 {
		t.Errorf("the next consumer got job %s attempt %d, want %s attempt 2", d.Job.ID, d.Attempt, jobID)
	}
}

func recv[T any](t testing.TB, ctx context.Context, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("timed out waiting: %v", ctx.Err())
		var zero T
		return zero
	}
}

func consumerInfo(t testing.TB, ctx context.Context, js jetstream.JetStream, pool string) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := js.Consumer(ctx, wire.JobsStream, wire.ConsumerName(pool))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)

	consume(t, ctx, tb.b, 2, func(ctx context.Context, d *broker.Delivery) {
		r := newResult(d.Job.ID, "ran: "+d.Job.Code)
		r.Attempt = d.Attempt
		if _, err := tb.b.PutResult(ctx, r); err != nil {
			t.Errorf("PutResult: %v", err)
		}
		if err := d.Ack(); err != nil {
			t.Errorf("Ack: %v", err)
		}
	})

	job := newJob("print(1)")
	watching := make(chan struct{})
	var once sync.Once
	broker.SetWaitingHook(tb.b, func(id string) {
		if id == job.ID {
			once.Do(func() { close(watching) })
		}
	})
	type res struct {
		r   *wire.Result
		err error
	}
	before := make(chan res, 1)
	go func() {
		r, err := tb.b.WaitResult(ctx, job.ID)
		before <- res{r, err}
	}()
	recv(t, ctx, watching) // WaitResult watches a key that does not exist yet

	if err := tb.b.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	if job.V != wire.Version || job.EnqueuedAt.IsZero() || job.CodeRef != "" {
		t.Errorf("PublishJob stamped V=%d EnqueuedAt=%v CodeRef=%q", job.V, job.EnqueuedAt, job.CodeRef)
	}
	got := recv(t, ctx, before)
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.r.JobID != job.ID || got.r.Stdout != "ran: print(1)" || got.r.Attempt != 1 || got.r.V != wire.Version {
		t.Errorf("WaitResult before = %+v", got.r)
	}

	after, err := tb.b.WaitResult(ctx, job.ID) // the result exists already
	if err != nil {
		t.Fatal(err)
	}
	direct, err := tb.b.GetResult(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(after, got.r) || !reflect.DeepEqual(direct, got.r) {
		t.Errorf("results differ:\nwait before %+v\nwait after  %+v\nget         %+v", got.r, after, direct)
	}
	if err := tb.b.Ping(ctx); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func TestWaitResultContext(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx, cancel := context.WithCancel(testCtx(t))
	broker.SetWaitingHook(tb.b, func(string) { cancel() })
	_, err := tb.b.WaitResult(ctx, ulid.Make().String())
	if err != context.Canceled {
		t.Fatalf("WaitResult = %v, want context.Canceled", err)
	}
	_, err = tb.b.GetResult(testCtx(t), ulid.Make().String())
	if !errors.Is(err, wire.ErrResultNotFound) {
		t.Fatalf("GetResult = %v, want ErrResultNotFound", err)
	}
}

func TestPublishValidation(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	for name, job := range map[string]*wire.Job{
		"nil":       nil,
		"no id":     {Pool: wire.DefaultPool},
		"id dots":   {ID: "a.b", Pool: wire.DefaultPool},
		"wildcard":  {ID: "x", Pool: "a.>"},
		"uppercase": {ID: "x", Pool: "GPU"},
	} {
		if err := tb.b.PublishJob(ctx, job); err == nil {
			t.Errorf("%s: PublishJob accepted %+v", name, job)
		}
	}
	job := newJob("x")
	job.Pool = ""
	if err := tb.b.PublishJob(ctx, job); err != nil || job.Pool != wire.DefaultPool {
		t.Errorf("empty pool: err=%v pool=%q", err, job.Pool)
	}
}

func TestDedup(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)

	job := newJob("print('once')")
	for range 2 {
		if err := tb.b.PublishJob(ctx, job); err != nil {
			t.Fatal(err)
		}
	}
	s, err := tb.js.Stream(ctx, wire.JobsStream)
	if err != nil {
		t.Fatal(err)
	}
	si, err := s.Info(ctx, jetstream.WithSubjectFilter(wire.JobSubject(wire.DefaultPool)))
	if err != nil {
		t.Fatal(err)
	}
	if n := si.State.Subjects[wire.JobSubject(wire.DefaultPool)]; n != 1 {
		t.Fatalf("stream holds %d jobs, want 1", n)
	}

	acked := ackIDs(t, ctx, tb.b, 2, 2)
	if id := recv(t, ctx, acked); id != job.ID {
		t.Fatalf("got job %s, want %s", id, job.ID)
	}
	info := consumerInfo(t, ctx, tb.js, wire.DefaultPool)
	if info.Delivered.Consumer != 1 || info.NumPending != 0 || info.NumAckPending != 0 {
		t.Errorf("consumer delivered %d, pending %d, ack pending %d; want 1, 0, 0",
			info.Delivered.Consumer, info.NumPending, info.NumAckPending)
	}
}

// The jobs stream keeps exactly one anchor, which no pool consumes, however
// often it is renewed and however many jobs drain through.
func TestJobsStreamAnchor(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	done := ackIDs(t, ctx, tb.b, 1, 4)
	for range 3 {
		if err := broker.RenewAnchor(ctx, tb.b); err != nil {
			t.Fatal(err)
		}
		job := newJob("print(1)")
		if err := tb.b.PublishJob(ctx, job); err != nil {
			t.Fatal(err)
		}
		if id := recv(t, ctx, done); id != job.ID {
			t.Fatalf("got job %s, want %s", id, job.ID)
		}
	}
	s, err := tb.js.Stream(ctx, wire.JobsStream)
	if err != nil {
		t.Fatal(err)
	}
	si, err := s.Info(ctx, jetstream.WithSubjectFilter(wire.JobsSubjectPre+">"))
	if err != nil {
		t.Fatal(err)
	}
	if len(si.State.Subjects) != 1 || si.State.Subjects[broker.AnchorSubject] != 1 {
		t.Errorf("stream subjects %v, want only one anchor", si.State.Subjects)
	}
}

func TestPutResultCreateOnly(t *testing.T) {
	t.Parallel()
	// 1 MiB payloads so that the large case goes through the blobs store.
	tb := setup(t, broker.EmbeddedConfig{MaxPayload: 1 << 20}, broker.Config{})
	ctx := testCtx(t)

	for name, size := range map[string]int{"small": 10, "large": 3 << 20} {
		id := ulid.Make().String()
		first := newResult(id, strings.Repeat("a", size))
		second := newResult(id, strings.Repeat("b", size))
		second.WorkerID = "w2"
		if stored, err := tb.b.PutResult(ctx, first); err != nil || !stored {
			t.Fatalf("%s: first PutResult = %v, %v", name, stored, err)
		}
		if stored, err := tb.b.PutResult(ctx, second); err != nil || stored {
			t.Fatalf("%s: second PutResult = %v, %v; want false, nil", name, stored, err)
		}
		got, err := tb.b.GetResult(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, first) {
			t.Errorf("%s: GetResult returned the second result (worker %s)", name, got.WorkerID)
		}
	}
}

func TestLargeResult(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{MaxPayload: 1 << 20}, broker.Config{})
	ctx := testCtx(t)

	id := ulid.Make().String()
	r := newResult(id, pattern(3<<20))
	r.Stderr = "<stderr> & \"quotes\"\n"
	if stored, err := tb.b.PutResult(ctx, r); err != nil || !stored {
		t.Fatalf("PutResult = %v, %v", stored, err)
	}
	for name, get := range map[string]func(context.Context, string) (*wire.Result, error){
		"GetResult": tb.b.GetResult, "WaitResult": tb.b.WaitResult,
	} {
		got, err := get(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("%s: result differs (stdout %d bytes, want %d)", name, len(got.Stdout), len(r.Stdout))
		}
	}
	// The bucket holds a stub, not the result.
	kv, err := tb.js.KeyValue(ctx, wire.ResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var stub wire.ResultStub
	if err := json.Unmarshal(e.Value(), &stub); err != nil || !strings.HasPrefix(stub.BlobRef, "result-"+id) {
		t.Errorf("KV value is not a stub: %.200s (%v)", e.Value(), err)
	}
}

// pattern returns n bytes of varied, partly non-ASCII, partly
// JSON-escaped text.
func pattern(n int) string {
	var sb strings.Builder
	sb.Grow(n + 64)
	for i := 0; sb.Len() < n; i++ {
		switch i % 4 {
		case 0:
			sb.WriteString("print(\"<hello & goodbye>\")\n")
		case 1:
			sb.WriteString("# héllo wörld ✓ \t\\n\n")
		case 2:
			sb.WriteByte(byte('a' + i%26))
		default:
			sb.WriteString("x = [i ** 2 for i in range(1000)]\n")
		}
	}
	return sb.String()[:n]
}

func TestLargeJobsUseObjectStore(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{MaxPayload: 1 << 20}, broker.Config{})
	// 48 MiB go through the object store and back: under -race on a busy
	// 2-core machine that took more than testTimeout once. The deadline
	// only stops a hung test; it measures nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)

	jobs := map[string]string{} // id -> code
	for _, size := range []int{4 << 20, 20 << 20} {
		job := newJob(pattern(size))
		if err := tb.b.PublishJob(ctx, job); err != nil {
			t.Fatalf("PublishJob %d bytes: %v", size, err)
		}
		if job.CodeRef != "job-"+job.ID {
			t.Errorf("CodeRef = %q, want job-%s", job.CodeRef, job.ID)
		}
		if len(job.Code) != size {
			t.Errorf("PublishJob changed the caller's code")
		}
		// Republishing (a retry) is deduplicated and keeps the blob.
		if err := tb.b.PublishJob(ctx, job); err != nil {
			t.Fatal(err)
		}
		jobs[job.ID] = job.Code
	}

	type got struct{ id, code, ref string }
	gotc := make(chan got, 2)
	consume(t, ctx, tb.b, 2, func(ctx context.Context, d *broker.Delivery) {
		gotc <- got{d.Job.ID, d.Job.Code, d.Job.CodeRef}
	})
	for range 2 {
		g := recv(t, ctx, gotc)
		want, ok := jobs[g.id]
		if !ok {
			t.Fatalf("unexpected job %s", g.id)
		}
		if g.code != want {
			t.Errorf("job %s: code differs: got %d bytes, want %d", g.id, len(g.code), len(want))
		}
		if g.ref != "job-"+g.id {
			t.Errorf("job %s: CodeRef %q", g.id, g.ref)
		}
	}
}

func TestJobTooLarge(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	job := newJob(strings.Repeat("x", broker.MaxJobBytes+1))
	if err := tb.b.PublishJob(ctx, job); !errors.Is(err, wire.ErrPayloadTooLarge) {
		t.Fatalf("PublishJob = %v, want ErrPayloadTooLarge", err)
	}
	// The code fits but its JSON encoding does not.
	job = newJob(strings.Repeat("\"", broker.MaxJobBytes/2+1))
	if err := tb.b.PublishJob(ctx, job); !errors.Is(err, wire.ErrPayloadTooLarge) {
		t.Fatalf("PublishJob escaped = %v, want ErrPayloadTooLarge", err)
	}
}

func TestInProgressHeartbeats(t *testing.T) {
	t.Parallel()
	// Heartbeats every 1.67 s: a CI run under -race on two busy cores once
	// stalled the heartbeat past an AckWait of 2 s.
	const ackWait = 5 * time.Second
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{AckWait: ackWait})
	ctx := testCtx(t)

	var mu sync.Mutex
	var attempts []int
	done := make(chan struct{})
	consume(t, ctx, tb.b, 2, func(ctx context.Context, d *broker.Delivery) {
		mu.Lock()
		attempts = append(attempts, d.Attempt)
		first := len(attempts) == 1
		mu.Unlock()
		if !first {
			return
		}
		// The work itself: longer than two AckWaits.
		select {
		case <-time.After(5 * ackWait / 2):
		case <-ctx.Done():
		}
		if err := d.Ack(); err != nil {
			t.Errorf("Ack: %v", err)
		}
		close(done)
	})
	if err := tb.b.PublishJob(ctx, newJob("import time; time.sleep(5)")); err != nil {
		t.Fatal(err)
	}
	recv(t, ctx, done)
	info := consumerInfo(t, ctx, tb.js, wire.DefaultPool)
	if info.NumRedelivered != 0 || info.Delivered.Consumer != 1 || info.NumAckPending != 0 {
		t.Errorf("redelivered %d, delivered %d, ack pending %d; want 0, 1, 0",
			info.NumRedelivered, info.Delivered.Consumer, info.NumAckPending)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 1 || attempts[0] != 1 {
		t.Errorf("handler saw attempts %v, want [1]", attempts)
	}
}

func TestStopNaksInFlight(t *testing.T) {
	t.Parallel()
	// AckWait far beyond the test's timeout: only the Nak can bring the job back in time.
	cfg := broker.Config{AckWait: 10 * time.Minute}
	tb := setup(t, broker.EmbeddedConfig{}, cfg)
	b2 := brokertest.Open(t, tb.e, cfg)
	ctx := testCtx(t)

	started := make(chan int, 1)
	handlerErr := make(chan error, 1)
	c1, err := tb.b.Consume(ctx, wire.DefaultPool, 1, func(ctx context.Context, d *broker.Delivery) {
		started <- d.Attempt
		<-ctx.Done()
		handlerErr <- ctx.Err()
		if err := d.Ack(); err == nil {
			t.Errorf("Ack after a hard stop succeeded")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	job := newJob("while True: pass")
	if err := tb.b.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	if a := recv(t, ctx, started); a != 1 {
		t.Fatalf("first attempt = %d", a)
	}

	expired, cancel := context.WithCancel(ctx)
	cancel()
	if err := c1.Stop(expired); err != context.Canceled {
		t.Errorf("Stop = %v, want context.Canceled", err)
	}
	if err := recv(t, ctx, handlerErr); err != context.Canceled {
		t.Errorf("handler ctx err = %v", err)
	}
	recv(t, ctx, c1.Done())
	if err := c1.Stop(ctx); err != nil { // idempotent
		t.Errorf("second Stop = %v", err)
	}

	requireRedelivered(t, ctx, b2, job.ID)
}

func TestConsumeContextEndsHardStop(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{AckWait: 10 * time.Minute})
	ctx := testCtx(t)

	consumeCtx, cancel := context.WithCancel(ctx)
	started := make(chan int, 2)
	c, err := tb.b.Consume(consumeCtx, wire.DefaultPool, 1, func(ctx context.Context, d *broker.Delivery) {
		started <- d.Attempt
		<-ctx.Done()
	})
	if err != nil {
		t.Fatal(err)
	}
	job := newJob("x")
	if err := tb.b.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	recv(t, ctx, started)
	cancel()
	recv(t, ctx, c.Done())
	requireRedelivered(t, ctx, tb.b, job.ID)
}

func TestDeadConsumerRedelivered(t *testing.T) {
	t.Parallel()
	cfg := broker.Config{AckWait: time.Second}
	tb := setup(t, broker.EmbeddedConfig{}, cfg)
	dying := brokertest.Open(t, tb.e, cfg)
	ctx := testCtx(t)

	started := make(chan int, 1)
	c1, err := dying.Consume(ctx, wire.DefaultPool, 1, func(ctx context.Context, d *broker.Delivery) {
		started <- d.Attempt
		<-ctx.Done() // cancelled when the connection dies
	})
	if err != nil {
		t.Fatal(err)
	}
	job := newJob("x")
	if err := tb.b.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	recv(t, ctx, started)
	dying.Conn().Close() // the worker dies without acking
	recv(t, ctx, c1.Done())

	requireRedelivered(t, ctx, tb.b, job.ID)
}

func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	b2 := brokertest.Open(t, tb.e, broker.Config{})
	ctx := testCtx(t)

	type counter struct {
		mu           sync.Mutex
		running, max int
		ids          []string
	}
	release := make(chan struct{})
	handler := func(cnt *counter, started chan<- struct{}) func(context.Context, *broker.Delivery) {
		return func(ctx context.Context, d *broker.Delivery) {
			cnt.mu.Lock()
			cnt.running++
			cnt.max = max(cnt.max, cnt.running)
			cnt.ids = append(cnt.ids, d.Job.ID)
			cnt.mu.Unlock()
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			cnt.mu.Lock()
			cnt.running--
			cnt.mu.Unlock()
		}
	}

	for range 5 {
		if err := tb.b.PublishJob(ctx, newJob("x")); err != nil {
			t.Fatal(err)
		}
	}
	var cnt1, cnt2 counter
	started1, started2 := make(chan struct{}, 5), make(chan struct{}, 5)
	c1 := consume(t, ctx, tb.b, 2, handler(&cnt1, started1))
	recv(t, ctx, started1)
	recv(t, ctx, started1)
	// The first consumer is full and must not hold the other three.
	c2 := consume(t, ctx, b2, 5, handler(&cnt2, started2))
	for range 3 {
		recv(t, ctx, started2)
	}
	close(release)
	for _, c := range []*broker.Consumer{c1, c2} {
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if cnt1.max != 2 || len(cnt1.ids) != 2 || len(cnt2.ids) != 3 {
		t.Errorf("consumer 1 ran %d (max %d at once), consumer 2 ran %d; want 2 (2), 3",
			len(cnt1.ids), cnt1.max, len(cnt2.ids))
	}
	seen := map[string]bool{}
	for _, id := range append(cnt1.ids, cnt2.ids...) {
		if seen[id] {
			t.Errorf("job %s ran twice", id)
		}
		seen[id] = true
	}
	// Handlers returned without settling: all were auto-acked by Stop's return.
	info := consumerInfo(t, ctx, tb.js, wire.DefaultPool)
	if info.NumAckPending != 0 || info.NumPending != 0 {
		t.Errorf("ack pending %d, pending %d after auto-ack", info.NumAckPending, info.NumPending)
	}
}

func TestGarbageTerminated(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)

	advisories := make(chan *nats.Msg, 4)
	sub, err := tb.b.Conn().ChanSubscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED."+
		wire.JobsStream+"."+wire.ConsumerName(wire.DefaultPool), advisories)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := tb.b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}

	subj := wire.JobSubject(wire.DefaultPool)
	for _, garbage := range []string{
		"not json at all",
		`{"v":99,"id":"01HZZZZZZZZZZZZZZZZZZZZZZZ","code":"x"}`,
		`{"v":1,"id":"x","code_ref":"result-someone-else"}`,
	} {
		if _, err := tb.js.Publish(ctx, subj, []byte(garbage)); err != nil {
			t.Fatal(err)
		}
	}
	job := newJob("good")
	if err := tb.b.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	handled := make(chan string, 4)
	c := consume(t, ctx, tb.b, 1, func(ctx context.Context, d *broker.Delivery) {
		handled <- d.Job.ID
	})

	for _, want := range []string{"undecodable", "version", "foreign code ref"} {
		m := recv(t, ctx, advisories)
		var adv struct {
			Reason string `json:"reason"`
		}
		if err := json.Unmarshal(m.Data, &adv); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(adv.Reason, want) {
			t.Errorf("termination reason %q does not mention %q", adv.Reason, want)
		}
	}
	if id := recv(t, ctx, handled); id != job.ID {
		t.Errorf("handler got %q, want %s", id, job.ID)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if len(handled) != 0 {
		t.Errorf("handler got %d more jobs", len(handled))
	}
}

func TestHandlerPanicNaks(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	attempts := make(chan int, 2)
	consume(t, ctx, tb.b, 1, func(ctx context.Context, d *broker.Delivery) {
		attempts <- d.Attempt
		if d.Attempt == 1 {
			panic("boom")
		}
	})
	if err := tb.b.PublishJob(ctx, newJob("x")); err != nil {
		t.Fatal(err)
	}
	if a := recv(t, ctx, attempts); a != 1 {
		t.Fatalf("attempt %d", a)
	}
	if a := recv(t, ctx, attempts); a != 2 {
		t.Fatalf("attempt after panic %d, want 2", a)
	}
}

func TestSurvivesRestart(t *testing.T) {
	t.Parallel()
	ecfg := broker.EmbeddedConfig{StoreDir: t.TempDir()} // in-process only
	ctx := testCtx(t)

	e1 := brokertest.StartNATSWith(t, ecfg)
	b1 := brokertest.Open(t, e1, broker.Config{})
	r := newResult(ulid.Make().String(), "kept")
	if _, err := b1.PutResult(ctx, r); err != nil {
		t.Fatal(err)
	}
	big := newResult(ulid.Make().String(), pattern(9<<20)) // a blob: over 8 MiB
	if _, err := b1.PutResult(ctx, big); err != nil {
		t.Fatal(err)
	}
	queued := newJob("still queued")
	if err := b1.PublishJob(ctx, queued); err != nil {
		t.Fatal(err)
	}
	b1.Close()
	e1.Shutdown()

	e2 := brokertest.StartNATSWith(t, ecfg)
	b2 := brokertest.Open(t, e2, broker.Config{})
	for _, want := range []*wire.Result{r, big} {
		got, err := b2.GetResult(ctx, want.JobID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("result %s changed across the restart", want.JobID)
		}
	}
	ids := make(chan string, 1)
	consume(t, ctx, b2, 1, func(ctx context.Context, d *broker.Delivery) { ids <- d.Job.ID })
	if id := recv(t, ctx, ids); id != queued.ID {
		t.Errorf("queued job %s, got %s", queued.ID, id)
	}
}

func TestEmbeddedTCP(t *testing.T) {
	t.Parallel()
	e := brokertest.StartNATS(t)
	url := e.ClientURL()
	if !strings.HasPrefix(url, "nats://127.0.0.1:") || strings.HasSuffix(url, ":-1") {
		t.Fatalf("ClientURL = %q", url)
	}
	b := brokertest.Open(t, e, broker.Config{URL: url})
	if err := b.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	inproc := brokertest.StartNATSWith(t, broker.EmbeddedConfig{})
	if u := inproc.ClientURL(); u != "" {
		t.Errorf("in-process-only ClientURL = %q", u)
	}
	if _, err := broker.StartEmbedded(broker.EmbeddedConfig{}); err == nil {
		t.Errorf("StartEmbedded without StoreDir succeeded")
	}
}

func TestOpenGivesUpWithContext(t *testing.T) {
	t.Parallel()
	e := brokertest.StartNATS(t)
	url := e.ClientURL()
	e.Shutdown() // nothing listens there any more
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	b, err := broker.Open(ctx, broker.Config{URL: url, Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		b.Close()
		t.Fatal("Open succeeded without a server")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Open = %v, want DeadlineExceeded", err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	cfg := broker.Config{}.WithDefaults()
	if cfg.Retention != 24*time.Hour || cfg.AckWait != 6*time.Second || cfg.MaxDeliver != 5 ||
		cfg.Replicas != 1 || cfg.Logger == nil || cfg.URL != nats.DefaultURL {
		t.Errorf("WithDefaults = %+v", cfg)
	}
	for _, bad := range []broker.Config{
		{AckWait: time.Millisecond},
		{Retention: -time.Second},
		{MaxDeliver: -2},
		{Replicas: 7},
	} {
		if _, err := broker.Open(testCtx(t), bad); err == nil {
			t.Errorf("Open accepted %+v", bad)
		}
	}
}

func TestConsumerRecreated(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	ids := ackIDs(t, ctx, tb.b, 1, 2)
	first := newJob("1")
	if err := tb.b.PublishJob(ctx, first); err != nil {
		t.Fatal(err)
	}
	recv(t, ctx, ids)
	// An operator deletes the pool's consumer under a running worker.
	if err := tb.js.DeleteConsumer(ctx, wire.JobsStream, wire.ConsumerName(wire.DefaultPool)); err != nil {
		t.Fatal(err)
	}
	second := newJob("2")
	if err := tb.b.PublishJob(ctx, second); err != nil {
		t.Fatal(err)
	}
	if id := recv(t, ctx, ids); id != second.ID {
		t.Errorf("got %s, want %s", id, second.ID)
	}
}

// A large job's code blob is deleted once the job is done, not kept on the
// server until the blobs bucket's TTL (every large call's code
// stayed for Retention); a copy of the job delivered after that finds its
// result stored and is acked, not terminated as a job without code.
func TestLargeJobCodeDroppedWhenDone(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{MaxPayload: 1 << 20}, broker.Config{})
	ctx := testCtx(t)
	blobs, err := tb.js.ObjectStore(ctx, wire.BlobsBucket)
	if err != nil {
		t.Fatal(err)
	}
	job := newJob(pattern(4 << 20))
	if err := tb.b.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	if _, err := blobs.GetInfo(ctx, job.CodeRef); err != nil {
		t.Fatalf("code blob %s after publishing: %v", job.CodeRef, err)
	}
	acked := make(chan error, 2)
	consume(t, ctx, tb.b, 1, func(ctx context.Context, d *broker.Delivery) {
		if _, err := tb.b.PutResult(ctx, newResult(d.Job.ID, "done")); err != nil {
			t.Errorf("PutResult: %v", err)
		}
		acked <- d.Ack()
	})
	if err := recv(t, ctx, acked); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if _, err := blobs.GetInfo(ctx, job.CodeRef); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("code blob %s after the job was done: %v, want it gone", job.CodeRef, err)
	}

	// The pool's copy of the same job (as a frontend publishes when a
	// targeted worker's presence lapses) comes after the code is gone.
	advisories := make(chan *nats.Msg, 4)
	sub, err := tb.b.Conn().ChanSubscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>", advisories)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := tb.b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	small := *job
	small.Code, small.CodeRef = "", job.CodeRef
	data, err := json.Marshal(&small)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.js.Publish(ctx, wire.JobSubject(wire.DefaultPool), data); err != nil {
		t.Fatal(err)
	}
	for {
		info := consumerInfo(t, ctx, tb.js, wire.DefaultPool)
		if info.Delivered.Consumer >= 2 && info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the copy was never settled: %+v", info)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := tb.b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-advisories:
		t.Errorf("the copy of a done job was terminated: %s", m.Data)
	default:
	}
	if len(acked) != 0 {
		t.Errorf("the handler ran the copy of a done job")
	}
}

// A Broker reads a bounded number of result blobs at once: a blob is read in
// chunks over the connection every call shares, and 16 calls reading a
// result of 2 MiB at once (get_job_result) timed the reads out on a 2-core
// machine and had the connection dropped, failing every call in flight on
// that frontend. With every slot taken a read waits (here until its
// context ends); given back, it reads. Many reads at once all succeed.
func TestResultBlobReadsBounded(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{MaxPayload: 1 << 20}, broker.Config{})
	ctx := testCtx(t)
	id := ulid.Make().String()
	r := newResult(id, strings.Repeat("\x01", 2<<20))
	if stored, err := tb.b.PutResult(ctx, r); err != nil || !stored {
		t.Fatalf("PutResult = %v, %v", stored, err)
	}
	give := broker.HoldBlobReads(tb.b)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := tb.b.GetResult(short, id); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("GetResult with every blob read slot taken: %v, want it to wait until its context ended", err)
	}
	give()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			got, err := tb.b.GetResult(ctx, id)
			if err == nil && len(got.Stdout) != len(r.Stdout) {
				err = errors.New("stdout differs")
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("one of 16 reads at once: %v", err)
		}
	}
}
