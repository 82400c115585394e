package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
)

// stampAudit copies into res what the audit needs of job: who sent it and
// the digest of its code.
func stampAudit(job *wire.Job, res *wire.Result) {
	res.Tenant, res.Principal, res.CodeSHA256 = job.Tenant, job.Principal, wire.CodeDigest(job.Code)
}

// audit writes the job's audit record as one log line, then queues it for
// its tenant's log of the day in the state store (read by `codexec admin
// audit`), which auditWriter appends. A record the store refuses is
// logged, not retried: the log line has it.
//
// The append is not made on the job's slot: it is a synced write (in
// `codexec dev`, a bbolt commit that took 4.5 ms p50 of wall time on a
// loaded machine), and the slot stayed taken for it after the result was
// stored and acked. Records queued together are appended together, one
// write per tenant and day. The queue is bounded (a full one makes the
// job's handler wait), and Stop waits for it to be written.
func (w *Worker) audit(ctx context.Context, job *wire.Job, res *wire.Result, log *slog.Logger) {
	rec := wire.NewAuditRecord(job, res)
	log.Info("job audit", "tenant", rec.Tenant, "principal", rec.Principal, "workspace", rec.Workspace,
		"kind", rec.Kind, "code_sha256", rec.CodeSHA256, "env", rec.EnvID, "status", rec.Status,
		"duration_ms", rec.DurationMS)
	line, _ := json.Marshal(rec)
	e := auditEntry{tenant: rec.Tenant, day: wire.AuditDay(rec.Time), line: append(line, '\n'), log: log,
		resultBytes: res.StoredBytes(), hour: statestore.ResultHour(time.Now())}
	if job.Batch != "" {
		// No call waits for a batch job's result: its place in its
		// tenant's jobs quota (frontend/batch_quota.go) is given back here,
		// once the result is stored.
		e.batchJob = job.ID
	}
	w.auditQ.put(ctx, w, e)
}

// auditEntry is one queued audit record.
type auditEntry struct {
	tenant, day string
	line        []byte
	log         *slog.Logger
	batchJob    string // the id of a batch job, whose place in the jobs quota goes
	// resultBytes is what the job's result takes where results are kept,
	// counted in its tenant's result bytes under hour (resultbytes.go).
	resultBytes int64
	hour        time.Time
}

// auditQueueSize bounds the records waiting to be appended.
const auditQueueSize = 1024

// auditBatchMax bounds the records one round of the writer takes.
const auditBatchMax = 256

// auditQueue is a worker's queue of audit records and its writer.
type auditQueue struct {
	once sync.Once
	ch   chan auditEntry
	done chan struct{}
	mu   sync.Mutex // over closed, and sends against the close
	shut bool
}

// put queues e, starting the writer on first use. After flush it appends
// e itself.
func (q *auditQueue) put(ctx context.Context, w *Worker, e auditEntry) {
	q.once.Do(func() {
		q.ch, q.done = make(chan auditEntry, auditQueueSize), make(chan struct{})
		go w.auditWriter(q.ch, q.done)
	})
	q.mu.Lock()
	if q.shut {
		q.mu.Unlock()
		w.appendAudit(ctx, []auditEntry{e})
		return
	}
	q.ch <- e
	q.mu.Unlock()
}

// flush stops the writer once every queued record is written.
func (q *auditQueue) flush() {
	q.once.Do(func() {}) // never started: nothing to write, and put appends directly from now on
	q.mu.Lock()
	if q.shut {
		q.mu.Unlock()
		return
	}
	q.shut = true
	ch := q.ch
	q.mu.Unlock()
	if ch != nil {
		close(ch)
		<-q.done
	}
}

// auditWriter appends the queued records until ch is closed, those queued
// together in one round.
//
// A round takes what comes within auditGather of its first record: each
// round is a synced write (in `codexec dev` a bbolt commit, two
// fdatasyncs), and one per job was half the commits of a sequential
// `execute_code` (the other is its run record). The log line is written at
// once; only the store's copy waits.
func (w *Worker) auditWriter(ch <-chan auditEntry, done chan<- struct{}) {
	defer close(done)
	batch := make([]auditEntry, 0, auditBatchMax)
	gather := time.NewTimer(0)
	<-gather.C
	for e := range ch {
		batch = append(batch[:0], e)
		gather.Reset(auditGather)
		open := true
	more:
		for open && len(batch) < auditBatchMax {
			select {
			case e, ok := <-ch:
				if !ok {
					open = false
					break more
				}
				batch = append(batch, e)
			case <-gather.C:
				break more
			}
		}
		if !gather.Stop() {
			select {
			case <-gather.C:
			default:
			}
		}
		w.appendAudit(context.Background(), batch)
		if !open {
			return
		}
	}
}

// auditGather is how long a round of the audit writer waits for more
// records after its first.
const auditGather = 20 * time.Millisecond

// appendAudit appends batch to the state store, one write per tenant and
// day, in the order queued, after recording any tenant not known yet.
func (w *Worker) appendAudit(ctx context.Context, batch []auditEntry) {
	type group struct {
		tenant, key string
		data        []byte
		entries     []auditEntry
	}
	var groups []*group
	byKey := map[string]*group{}
	for _, e := range batch {
		tenant := wire.TenantKey(e.tenant)
		key := w.cfg.Keys.Audit(tenant, e.day)
		g := byKey[key]
		if g == nil {
			g = &group{tenant: e.tenant, key: key}
			byKey[key] = g
			groups = append(groups, g)
		}
		g.data = append(g.data, e.line...)
		g.entries = append(g.entries, e)
	}
	for _, g := range groups {
		tenant := wire.TenantKey(g.tenant)
		if _, known := w.auditTenants.Load(tenant); !known {
			if err := w.store.HSet(ctx, w.cfg.Keys.AuditTenants(), tenant, []byte(g.tenant)); err != nil {
				for _, e := range g.entries {
					e.log.Warn("audit: tenant not recorded in the state store", "err", err)
				}
				continue
			}
			w.auditTenants.Store(tenant, true)
		}
		if _, err := w.store.Append(ctx, g.key, g.data, 0); err != nil {
			for _, e := range g.entries {
				e.log.Warn("audit: record not stored in the state store", "err", err)
			}
		}
	}
	w.chargeResultBytes(ctx, batch)
	for _, e := range batch {
		if e.batchJob == "" {
			continue
		}
		if err := w.store.Leave(ctx, w.cfg.Keys.TenantJobs(wire.TenantKey(e.tenant)), e.batchJob); err != nil {
			e.log.Warn("batch job's place in its tenant's jobs quota not given back (its ttl frees it)", "err", err)
		}
	}
}
