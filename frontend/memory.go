package frontend

import (
	"bytes"
	"container/list"
	"slices"
	"sync"
	"time"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/wire"
)

// What a frontend remembers of the state store, so that it can keep
// serving what does not need the store while the store is unreachable:
// each session's environment as it last read or wrote it, and the pool's
// presence records as it last read them. The store's answer always wins
// when there is one; the memory is read only when the store fails.

// maxRememberedSessions bounds envMemory: past it the least recently used
// session is forgotten (its next call during an outage is refused).
const maxRememberedSessions = 10000

// knownEnv is a session's environment as last seen: spec nil for the
// workers' default environment.
type knownEnv struct {
	spec *envspec.Spec
	id   string
}

// recent maps session scopes to what was last seen of them, at most max,
// the least recently used forgotten first.
type recent[V any] struct {
	mu    sync.Mutex
	max   int
	byKey map[string]*list.Element
	order list.List // of recentEntry[V], most recent at the front
}

type recentEntry[V any] struct {
	scope string
	v     V
}

// put records v for scope.
func (m *recent[V]) put(scope string, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.byKey[scope]; ok {
		e.Value = recentEntry[V]{scope, v}
		m.order.MoveToFront(e)
		return
	}
	if m.byKey == nil {
		m.byKey = make(map[string]*list.Element)
	}
	m.byKey[scope] = m.order.PushFront(recentEntry[V]{scope, v})
	for m.order.Len() > max(m.max, 1) {
		last := m.order.Back()
		m.order.Remove(last)
		delete(m.byKey, last.Value.(recentEntry[V]).scope)
	}
}

// forget drops scope.
func (m *recent[V]) forget(scope string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.byKey[scope]; ok {
		m.order.Remove(e)
		delete(m.byKey, scope)
	}
}

// get returns what was last recorded for scope, if anything.
func (m *recent[V]) get(scope string) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byKey[scope]
	if !ok {
		var zero V
		return zero, false
	}
	m.order.MoveToFront(e)
	return e.Value.(recentEntry[V]).v, true
}

// envMemory maps session scopes to their last known environment.
type envMemory struct{ r recent[knownEnv] }

func newEnvMemory(max int) *envMemory { return &envMemory{r: recent[knownEnv]{max: max}} }

// put records scope's environment (spec nil: the default one).
func (m *envMemory) put(scope string, spec *envspec.Spec, id string) {
	m.r.put(scope, knownEnv{spec: cloneSpec(spec), id: id})
}

// get returns scope's last known environment, if any.
func (m *envMemory) get(scope string) (knownEnv, bool) {
	k, ok := m.r.get(scope)
	k.spec = cloneSpec(k.spec)
	return k, ok
}

// cloneSpec is a copy of spec, so that the memory and its callers never
// share one (nil for nil).
func cloneSpec(spec *envspec.Spec) *envspec.Spec {
	if spec == nil {
		return nil
	}
	c := *spec
	return &c
}

// presenceMemory is the pool's presence as last read, and when the store
// last failed to answer.
type presenceMemory struct {
	mu       sync.Mutex
	adverts  []envspec.Advert
	readAt   time.Time // when adverts were read
	failedAt time.Time // the last failed read
	// raw and decoded are the records last decoded (decode).
	raw     map[string][]byte
	decoded []envspec.Advert
}

func (p *presenceMemory) read(adverts []envspec.Advert, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.adverts, p.readAt = append([]envspec.Advert(nil), adverts...), at
}

func (p *presenceMemory) failed(at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failedAt = at
}

// last returns the adverts read within maxAge of now, if any were.
func (p *presenceMemory) last(now time.Time, maxAge time.Duration) ([]envspec.Advert, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.readAt.IsZero() || now.Sub(p.readAt) > maxAge {
		return nil, false
	}
	return append([]envspec.Advert(nil), p.adverts...), true
}

// failedWithin reports whether a read failed within d of now.
func (p *presenceMemory) failedWithin(now time.Time, d time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.failedAt.IsZero() && now.Sub(p.failedAt) <= d
}

// decode returns members (the pool's presence records as the store
// returned them) decoded, reusing the last decoding when every record is
// byte for byte the same: records change on a worker's heartbeat, every
// few seconds, and every call reads them (decoding them each time was 2%
// of `codexec dev`'s CPU under 8 callers). The slice is the caller's.
func (p *presenceMemory) decode(members map[string][]byte) []envspec.Advert {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !sameRecords(p.raw, members) {
		p.raw, p.decoded = members, envspec.DecodeAdverts(members)
	}
	return slices.Clone(p.decoded)
}

// sameRecords says whether a and b hold the same members with the same
// bytes.
func sameRecords(a, b map[string][]byte) bool {
	if a == nil || len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// holderMemory maps session scopes to the worker that last held their
// working directory, as this frontend last read it in the session's record
// or saw it run one of the session's jobs, or to wire.NoHolder for a
// session it read no record of: while the store is unreachable a session's
// jobs still go to that worker, whose copy of its files is the newest,
// instead of to any worker, each of which would run on a copy of its own
// and the first saved afterwards would win (see workspaceHolder).
type holderMemory struct{ r recent[string] }

// put records that worker holds scope's working directory (wire.NoHolder:
// that none does).
func (m *holderMemory) put(scope, worker string) {
	if worker == "" {
		worker = wire.NoHolder
	}
	m.r.put(scope, worker)
}

// get returns the worker last known to hold scope's working directory,
// wire.NoHolder when none did, "" when this frontend knows nothing of it.
func (m *holderMemory) get(scope string) string {
	w, _ := m.r.get(scope)
	return w
}
