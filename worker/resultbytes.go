package worker

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
)

// A tenant's result bytes: what its jobs' results take where results are
// kept (JetStream, for the results' retention), for the result_bytes quota
// that the frontends enforce. Each worker counts the results it stores per
// tenant and hour, and writes its running total of the hour in the
// tenant's hash (statestore.Keys.TenantResultBytes), one field per hour
// and worker, of which it is the only writer: no two writers race, and a
// frontend sums the hours still within the retention. Counted with the
// audit records, off the job's slot, and written at most once every
// resultBytesEvery per tenant (a write of the state store is a synced
// commit in codexec dev), the last total when the worker stops.

// resultBytesEvery is how often at most a tenant's running total is
// written.
const resultBytesEvery = time.Second

// resultBytes is a worker's running totals of the current hours.
type resultBytes struct {
	mu      sync.Mutex
	totals  map[resultBytesKey]*resultTotal
	pending *time.Timer // writes the totals not written yet
}

type resultBytesKey struct {
	key   string // the tenant's hash
	field string // statestore.ResultBytesField of the hour and this worker
}

type resultTotal struct {
	n       int64     // bytes
	written time.Time // when n was last written; zero: never
	dirty   bool      // n has changed since
}

// chargeResultBytes adds the result bytes of batch's entries to their
// tenants' hours, and writes the totals not written for resultBytesEvery;
// the others are written by a timer, or by flushResultBytes.
func (w *Worker) chargeResultBytes(ctx context.Context, batch []auditEntry) {
	rb := &w.resultBytes
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.totals == nil {
		rb.totals = map[resultBytesKey]*resultTotal{}
	}
	for _, e := range batch {
		if e.resultBytes <= 0 {
			continue
		}
		k := resultBytesKey{w.cfg.Keys.TenantResultBytes(wire.TenantKey(e.tenant)), statestore.ResultBytesField(e.hour, w.cfg.ID)}
		t := rb.totals[k]
		if t == nil {
			t = &resultTotal{n: w.firstResultBytes(ctx, k)}
			rb.totals[k] = t
		}
		t.n += e.resultBytes
		t.dirty = true
	}
	w.writeResultBytes(ctx, false)
}

// writeResultBytes writes the changed totals (all of them, or those not
// written for resultBytesEvery), and arms the timer for the rest. With
// rb.mu held.
func (w *Worker) writeResultBytes(ctx context.Context, all bool) {
	rb := &w.resultBytes
	now := time.Now()
	wait := false
	for k, t := range rb.totals {
		if !t.dirty {
			continue
		}
		if !all && now.Sub(t.written) < resultBytesEvery {
			wait = true
			continue
		}
		if err := w.store.HSet(ctx, k.key, k.field, strconv.AppendInt(nil, t.n, 10)); err != nil {
			w.log.Warn("result bytes not recorded in the state store (the tenant's result_bytes quota undercounts them)", "err", err)
		}
		t.written, t.dirty = now, false
	}
	// Totals of past hours are final once written: forget them.
	hour := statestore.ResultHour(now)
	for k, t := range rb.totals {
		if h, _, ok := statestore.ParseResultBytesField(k.field); (!ok || h.Before(hour)) && !t.dirty {
			delete(rb.totals, k)
		}
	}
	if wait && rb.pending == nil {
		rb.pending = time.AfterFunc(resultBytesEvery, func() {
			rb.mu.Lock()
			defer rb.mu.Unlock()
			rb.pending = nil
			w.writeResultBytes(context.Background(), false)
		})
	}
}

// flushResultBytes writes every total not written yet (the worker is
// stopping).
func (w *Worker) flushResultBytes() {
	rb := &w.resultBytes
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.pending != nil {
		rb.pending.Stop()
		rb.pending = nil
	}
	w.writeResultBytes(context.Background(), true)
}

// firstResultBytes is the total already recorded in k (by this worker
// before it restarted, within the hour), read when the worker first counts
// in k; it also removes the tenant's fields of hours past the retention,
// which no frontend counts any more.
func (w *Worker) firstResultBytes(ctx context.Context, k resultBytesKey) int64 {
	fields, err := w.store.HGetAll(ctx, k.key)
	if err != nil {
		return 0
	}
	retention := broker.DefaultRetention
	if w.broker != nil && w.broker.Retention() > 0 {
		retention = w.broker.Retention()
	}
	var stale []string
	for f := range fields {
		if hour, _, ok := statestore.ParseResultBytesField(f); ok && hour.Add(time.Hour).Before(time.Now().Add(-retention-time.Hour)) {
			stale = append(stale, f)
		}
	}
	if len(stale) > 0 {
		_ = w.store.HDel(ctx, k.key, stale...)
	}
	n, _ := strconv.ParseInt(string(fields[k.field]), 10, 64)
	return max(n, 0)
}
