package frontend

import (
	"encoding/json"
	"testing"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/wire"
)

// The decoded presence records are reused only while every record is the
// same: a worker's new heartbeat (its load, its environments), a worker
// gone or come, is seen on the next read; and what a caller does to the
// slice it got stays its own.
func TestPresenceDecodedAgainWhenARecordChanges(t *testing.T) {
	t.Parallel()
	record := func(id string, load int) []byte {
		b, _ := json.Marshal(envspec.Advert{WorkerID: id, Pool: "default", Load: load})
		return b
	}
	var p presenceMemory
	members := map[string][]byte{"w1": record("w1", 0), "w2": record("w2", 1)}
	got := p.decode(members)
	if len(got) != 2 || got[0].WorkerID != "w1" || got[1].Load != 1 {
		t.Fatalf("decoded %+v", got)
	}
	got[0].WorkerID = "changed by the caller"
	if again := p.decode(map[string][]byte{"w1": record("w1", 0), "w2": record("w2", 1)}); again[0].WorkerID != "w1" {
		t.Errorf("a caller's change to its slice reached the next read: %+v", again)
	}
	if beat := p.decode(map[string][]byte{"w1": record("w1", 3), "w2": record("w2", 1)}); beat[0].Load != 3 {
		t.Errorf("a renewed record with a new load read as the old one: %+v", beat)
	}
	if gone := p.decode(map[string][]byte{"w2": record("w2", 1)}); len(gone) != 1 || gone[0].WorkerID != "w2" {
		t.Errorf("after w1 left: %+v", gone)
	}
	if none := p.decode(map[string][]byte{}); len(none) != 0 {
		t.Errorf("no records read as %+v", none)
	}
}

// holderMemory keeps at most max sessions, the least recently used out.
func TestHolderMemoryIsBounded(t *testing.T) {
	m := holderMemory{recent[string]{max: 2}}
	m.put("a", "w1")
	m.put("b", "w2")
	_ = m.get("a")
	m.put("c", "w3") // b is the least recently used
	if m.get("a") != "w1" || m.get("b") != "" || m.get("c") != "w3" {
		t.Fatalf("a=%q b=%q c=%q", m.get("a"), m.get("b"), m.get("c"))
	}
	// A session read to have no holder is remembered as such, not
	// forgotten: its jobs, while the store is away, say so to the worker.
	m.put("a", "")
	if m.get("a") != wire.NoHolder || m.r.order.Len() != 2 {
		t.Fatalf("a known to have none: %q, %d left", m.get("a"), m.r.order.Len())
	}
}
