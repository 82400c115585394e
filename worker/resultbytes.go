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
// frontend sums the hours still within the retention. Written with the
// audit records, off the job's slot.

// resultBytes is a worker's running totals of the current hours.
type resultBytes struct {
	mu     sync.Mutex
	totals map[resultBytesKey]int64
}

type resultBytesKey struct {
	key   string // the tenant's hash
	field string // statestore.ResultBytesField of the hour and this worker
}

// chargeResultBytes adds the result bytes of batch's entries to their
// tenants' hours and writes the totals changed.
func (w *Worker) chargeResultBytes(ctx context.Context, batch []auditEntry) {
	rb := &w.resultBytes
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.totals == nil {
		rb.totals = map[resultBytesKey]int64{}
	}
	changed := map[resultBytesKey]*auditEntry{}
	for i, e := range batch {
		if e.resultBytes <= 0 {
			continue
		}
		k := resultBytesKey{w.cfg.Keys.TenantResultBytes(wire.TenantKey(e.tenant)), statestore.ResultBytesField(e.hour, w.cfg.ID)}
		if _, ok := rb.totals[k]; !ok {
			rb.totals[k] = w.firstResultBytes(ctx, k)
		}
		rb.totals[k] += e.resultBytes
		changed[k] = &batch[i]
	}
	for k, e := range changed {
		if err := w.store.HSet(ctx, k.key, k.field, strconv.AppendInt(nil, rb.totals[k], 10)); err != nil {
			e.log.Warn("result bytes not recorded in the state store (the tenant's result_bytes quota undercounts them)", "err", err)
		}
	}
	// Totals of past hours are final: forget them.
	now := statestore.ResultHour(time.Now())
	for k := range rb.totals {
		if hour, _, ok := statestore.ParseResultBytesField(k.field); !ok || hour.Before(now.Add(-time.Hour)) {
			delete(rb.totals, k)
		}
	}
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
