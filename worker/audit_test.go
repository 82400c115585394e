package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/statestore/redistest"
	"github.com/codexec/codexec/wire"
	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"
)

// redisStore starts a redis-server and opens a store on it, for the
// length of the test (its context ends after a minute).
func redisStore(t *testing.T) (context.Context, *redistest.Server, *statestore.RedisStore) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	srv := redistest.Start(t)
	st, err := statestore.NewRedis(ctx, statestore.RedisOptions{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return ctx, srv, st
}

// auditWorker is a worker (never started) of id on st.
func auditWorker(t *testing.T, st statestore.Store, id string) *Worker {
	t.Helper()
	w, err := New(Config{ID: id, DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)}, nil, st)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// A job's audit record is queued, not written on the job's slot: with the
// state store's writes paused, audit returns (the job's handler goes on to
// free its slot), and the records are in the store, in order, once the
// queue is flushed (as Stop does). Before, the handler waited for the
// store's write (a synced bbolt commit in codexec dev, milliseconds)
// before the slot was free for the next job.
func TestAuditIsQueuedOffTheJobsSlot(t *testing.T) {
	ctx, srv, st := redisStore(t)
	w := auditWorker(t, st, "audit")
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "60000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	unpause := func() { _ = admin.Do(context.Background(), "CLIENT", "UNPAUSE").Err() }
	t.Cleanup(unpause)

	var jobs []*wire.Job
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for i := range 3 {
			job := &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Scope: "s", Tenant: "acme", Code: fmt.Sprint(i)}
			jobs = append(jobs, job)
			res := &wire.Result{JobID: job.ID, Status: wire.StatusOK, FinishedAt: time.Now().UTC(), WorkerID: "audit"}
			stampAudit(job, res)
			w.audit(ctx, job, res, w.log)
		}
	}()
	select {
	case <-returned:
	case <-time.After(20 * time.Second):
		t.Fatal("audit waited for the state store's write (writes paused)")
	}
	unpause()
	w.auditQ.flush()

	data, err := st.Get(ctx, w.cfg.Keys.Audit(wire.TenantKey("acme"), wire.AuditDay(time.Now())))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	if len(lines) != len(jobs) {
		t.Fatalf("%d audit records stored, want %d:\n%s", len(lines), len(jobs), data)
	}
	for i, line := range lines {
		var rec wire.AuditRecord
		if err := json.Unmarshal(line, &rec); err != nil || rec.JobID != jobs[i].ID || rec.Tenant != "acme" {
			t.Errorf("record %d: %s (%v), want job %s", i, line, err, jobs[i].ID)
		}
	}
	// After the flush (a stopped worker), a record is written at once.
	late := &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Scope: "s", Tenant: "late"}
	w.audit(ctx, late, &wire.Result{JobID: late.ID, Status: wire.StatusOK, FinishedAt: time.Now().UTC()}, w.log)
	if data, err := st.Get(ctx, w.cfg.Keys.Audit(wire.TenantKey("late"), wire.AuditDay(time.Now()))); err != nil || !bytes.Contains(data, []byte(late.ID)) {
		t.Errorf("record audited after the flush: %q, %v", data, err)
	}
}

// A batch job's place in its tenant's jobs quota (taken by the frontend
// that queued it, which does not wait for its result) is given back once
// its result is stored and audited; an interactive job's is not touched
// here (its frontend gives it back).
func TestAuditGivesBackBatchJobsQuotaPlace(t *testing.T) {
	ctx, _, st := redisStore(t)
	w := auditWorker(t, st, "audit")
	set := w.cfg.Keys.TenantJobs(wire.TenantKey("acme"))
	batch := &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Scope: "b", Batch: "quota-batch-0123456789", Tenant: "acme"}
	call := &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Scope: "s", Tenant: "acme"}
	for _, job := range []*wire.Job{batch, call} {
		if adm, err := st.Admit(ctx, set, job.ID, nil, 10, time.Hour); err != nil || !adm.Admitted {
			t.Fatalf("admit %s: %+v %v", job.ID, adm, err)
		}
	}
	for _, job := range []*wire.Job{batch, call} {
		res := &wire.Result{JobID: job.ID, Status: wire.StatusOK, FinishedAt: time.Now().UTC(), WorkerID: "audit"}
		stampAudit(job, res)
		w.audit(ctx, job, res, w.log)
	}
	w.auditQ.flush()
	members, err := st.Members(ctx, set)
	if err != nil {
		t.Fatal(err)
	}
	if _, held := members[batch.ID]; held || len(members) != 1 {
		t.Fatalf("places held after the results: %v; want only the interactive job's %s", members, call.ID)
	}
}

// The bytes of a tenant's results are recorded per hour and worker, in the
// tenant's hash, for the result_bytes quota: a worker's running total of
// the hour, carried on by the same worker after a restart; fields of hours
// past the results' retention are removed.
func TestAuditRecordsResultBytes(t *testing.T) {
	ctx, _, st := redisStore(t)
	newWorker := func() *Worker { return auditWorker(t, st, "rb") }
	// All in one hour: a test started in an hour's last seconds waits for
	// the next.
	if d := time.Until(statestore.ResultHour(time.Now()).Add(time.Hour)); d < 15*time.Second {
		time.Sleep(d + time.Second)
	}
	w := newWorker()
	key := w.cfg.Keys.TenantResultBytes(wire.TenantKey("acme"))
	stale := statestore.ResultBytesField(statestore.ResultHour(time.Now().Add(-72*time.Hour)), "gone")
	if err := st.HSet(ctx, key, stale, []byte("12345")); err != nil {
		t.Fatal(err)
	}
	audit := func(w *Worker, tenant, stdout string) {
		job := &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Scope: "s", Tenant: tenant}
		res := &wire.Result{JobID: job.ID, Status: wire.StatusOK, Stdout: stdout, FinishedAt: time.Now().UTC(), WorkerID: "rb"}
		stampAudit(job, res)
		w.audit(ctx, job, res, w.log)
	}
	audit(w, "acme", strings.Repeat("x", 1000))
	audit(w, "acme", strings.Repeat("y", 500))
	audit(w, "globex", "z")
	w.auditQ.flush()
	w.flushResultBytes() // as Stop does
	w2 := newWorker()    // the same worker, restarted
	audit(w2, "acme", strings.Repeat("x", 25))
	audit(w2, "acme", strings.Repeat("x", 5))
	// Without a flush: a running total not written for a second is written
	// at once (1525), a change within the second by a timer a second later.
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := st.HGet(ctx, key, statestore.ResultBytesField(statestore.ResultHour(time.Now()), "rb"))
		if err == nil && string(v) == "1530" || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	w2.auditQ.flush()

	hour := statestore.ResultHour(time.Now())
	fields, err := st.HGetAll(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	field := statestore.ResultBytesField(hour, "rb")
	if got := string(fields[field]); got != "1530" || len(fields) != 1 {
		t.Fatalf("acme's result bytes: %q, want only %s = 1530 (the stale hour removed)", fields, field)
	}
	if got, err := st.HGet(ctx, w.cfg.Keys.TenantResultBytes(wire.TenantKey("globex")), field); err != nil || string(got) != "1" {
		t.Fatalf("globex's result bytes: %q %v, want 1", got, err)
	}
}
