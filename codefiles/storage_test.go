package codefiles

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/statestore/redistest"
	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"
)

// What a session keeps: each distinct run code once, dropped with its last
// run, and everything counted against MaxSessionBytes.

func runStorageSuite(t *testing.T, newStore newStoreFunc) {
	t.Run("RunCodeStoredOnce", func(t *testing.T) {
		t.Parallel()
		b := setupCodeStore(t, newStore, Config{})
		code := bigCode(16<<20, 'a')
		ids := recordRuns(t, b.cs, "local", code, 6)
		requireUsage(t, b, "local", 16<<20)
		for _, id := range ids {
			got, run, err := b.cs.ReadRun(b.ctx, "local", id)
			if err != nil || got != code || run.JobID != id || run.Size != 16<<20 {
				t.Fatalf("ReadRun(%s) = %d bytes, %+v, %v", id, len(got), run, err)
			}
		}
		// Another session keeps its own copy, counted against its own budget.
		recordRuns(t, b.cs, "other", code, 1)
		requireUsage(t, b, "other", 16<<20)
		requireUsage(t, b, "local", 16<<20)
	})

	t.Run("PruneDropsUnreferencedCode", func(t *testing.T) {
		t.Parallel()
		b := setupCodeStore(t, newStore, Config{RunHistory: 10})
		shared := bigCode(1000, 's')
		var distinct []string
		for i := range 30 {
			code := shared
			if i%2 == 1 {
				code = fmt.Sprintf("print(%d)  # %s", i, strings.Repeat("d", 100))
				distinct = append(distinct, code)
			}
			recordRuns(t, b.cs, "local", code, 1)
		}
		runs, err := b.cs.Runs(b.ctx, "local")
		if err != nil || len(runs) > 10 {
			t.Fatalf("Runs = %d runs, %v; want at most 10", len(runs), err)
		}
		kept := map[string]int64{}
		for _, r := range runs {
			code, _, err := b.cs.ReadRun(b.ctx, "local", r.JobID)
			if err != nil {
				t.Fatalf("ReadRun(%s): %v", r.JobID, err)
			}
			kept[code] = int64(len(code))
		}
		// The pruned runs' own code is gone from the store; what is left
		// is exactly the code of the kept runs.
		for _, code := range distinct {
			_, err := b.store.Get(b.ctx, b.cfg.Keys.RunCode("local", sha(code)))
			if _, ok := kept[code]; !ok && !errors.Is(err, statestore.ErrNotFound) {
				t.Fatalf("the code of a pruned run is still stored: %v", err)
			}
		}
		var want int64
		for _, n := range kept {
			want += n
		}
		requireUsage(t, b, "local", want)

		// Past their retention, runs go with their code.
		if err := b.cs.pruneRuns(b.ctx, "local", 0); err != nil {
			t.Fatal(err)
		}
		requireUsage(t, b, "local", 0)
		if _, err := b.store.Get(b.ctx, b.cfg.Keys.RunCode("local", sha(shared))); !errors.Is(err, statestore.ErrNotFound) {
			t.Fatalf("code still stored with no run left: %v", err)
		}
	})

	t.Run("ExpiredRunsDropTheirCode", func(t *testing.T) {
		t.Parallel()
		b := setupCodeStore(t, newStore, Config{RunRetention: 200 * time.Millisecond})
		recordRuns(t, b.cs, "local", "print(1)", 2)
		requireUsage(t, b, "local", 8)
		deadline := time.Now().Add(10 * time.Second)
		for {
			runs, err := b.cs.Runs(b.ctx, "local")
			if err != nil {
				t.Fatal(err)
			}
			if len(runs) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("runs outlived their retention: %+v", runs)
			}
			time.Sleep(50 * time.Millisecond)
		}
		requireUsage(t, b, "local", 0)
	})

	t.Run("BudgetRefusesFileWrites", func(t *testing.T) {
		t.Parallel()
		b := setupCodeStore(t, newStore, Config{MaxSessionBytes: 100})
		if _, _, _, err := b.cs.Init(b.ctx, "local", "a.py", bigCode(60, 'a')); err != nil {
			t.Fatal(err)
		}
		_, _, _, err := b.cs.Init(b.ctx, "local", "b.py", bigCode(50, 'b'))
		requireStorageFull(t, err, "the session keeps 60 bytes", "the limit is 100 bytes", "needs 50 more")
		if _, _, err := b.cs.Read(b.ctx, "local", "b.py"); !errors.Is(err, ErrFileNotFound) {
			t.Fatalf("a refused initialize created the file: %v", err)
		}
		_, err = b.cs.Append(b.ctx, "local", "a.py", bigCode(41, 'x'))
		requireStorageFull(t, err, "the session keeps 60 bytes", "the limit is 100 bytes", "needs 41 more", "nothing was appended")
		requireContent(t, b.cs, "local", "a.py", bigCode(60, 'a'))
		if _, err := b.cs.Append(b.ctx, "local", "a.py", bigCode(40, 'x')); err != nil {
			t.Fatalf("an append up to the limit: %v", err)
		}
		requireUsage(t, b, "local", 100)
		// Replacing with less, and deleting, give the room back.
		if _, _, _, err := b.cs.Init(b.ctx, "local", "a.py", bigCode(30, 'a')); err != nil {
			t.Fatal(err)
		}
		requireUsage(t, b, "local", 30)
		if _, _, _, err := b.cs.Init(b.ctx, "local", "b.py", bigCode(70, 'b')); err != nil {
			t.Fatal(err)
		}
		if _, err := b.cs.Delete(b.ctx, "local", "b.py"); err != nil {
			t.Fatal(err)
		}
		requireUsage(t, b, "local", 30)
		// Another session has its own budget.
		if _, _, _, err := b.cs.Init(b.ctx, "other", "b.py", bigCode(100, 'b')); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("BudgetDropsOldestRuns", func(t *testing.T) {
		t.Parallel()
		b := setupCodeStore(t, newStore, Config{MaxSessionBytes: 100})
		if _, _, _, err := b.cs.Init(b.ctx, "local", "a.py", bigCode(40, 'a')); err != nil {
			t.Fatal(err)
		}
		first := recordRuns(t, b.cs, "local", bigCode(25, '1'), 1)
		second := recordRuns(t, b.cs, "local", bigCode(25, '2'), 1)
		requireUsage(t, b, "local", 90)
		// A new code that does not fit: the oldest run makes room.
		third := recordRuns(t, b.cs, "local", bigCode(25, '3'), 1)
		requireUsage(t, b, "local", 90)
		requireRuns(t, b.cs, "local", third[0], second[0])
		if _, _, err := b.cs.ReadRun(b.ctx, "local", first[0]); !errors.Is(err, ErrRunNotFound) {
			t.Fatalf("the dropped run reads: %v", err)
		}
		// Code already kept costs nothing, so it never drops a run.
		recordRuns(t, b.cs, "local", bigCode(25, '2'), 1)
		requireUsage(t, b, "local", 90)
		if runs, _ := b.cs.Runs(b.ctx, "local"); len(runs) != 3 {
			t.Fatalf("%d runs after running kept code again, want 3", len(runs))
		}
		// A code that would not fit beside the files even with every run
		// dropped is refused, and drops nothing.
		err := b.cs.RecordRun(b.ctx, "local", RunInfo{JobID: ulid.Make().String(), Filename: "big.py", Time: time.Now().UTC()}, bigCode(61, 'b'))
		requireStorageFull(t, err, "the limit is 100 bytes", "needs 61 more")
		if runs, _ := b.cs.Runs(b.ctx, "local"); len(runs) != 3 {
			t.Fatalf("%d runs after a refused run, want 3", len(runs))
		}
		requireUsage(t, b, "local", 90)
	})

	t.Run("ConcurrentRecordRun", func(t *testing.T) {
		t.Parallel()
		// Two frontends (two connections to Redis) record runs of the same
		// session at once, of the same few codes, and prune as they go.
		b := setupCodeStore(t, newStore, Config{RunHistory: 10})
		stores := []*CodeStore{b.cs, b.another()}
		codes := []string{bigCode(1000, 'a'), bigCode(2000, 'b'), bigCode(3000, 'c'), bigCode(4000, 'd')}
		var wg sync.WaitGroup
		errs := make(chan error, 2*40)
		for w, cs := range stores {
			wg.Go(func() {
				for i := range 40 {
					run := RunInfo{JobID: ulid.Make().String(), Filename: "c.py", Time: time.Now().UTC()}
					errs <- cs.RecordRun(b.ctx, "local", run, codes[(i+w)%len(codes)])
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		runs, err := b.cs.Runs(b.ctx, "local")
		if err != nil || len(runs) == 0 || len(runs) > 12 {
			t.Fatalf("Runs = %d runs, %v", len(runs), err)
		}
		kept := map[string]int64{}
		for _, r := range runs {
			code, _, err := b.cs.ReadRun(b.ctx, "local", r.JobID)
			if err != nil {
				t.Fatalf("ReadRun(%s) after concurrent recording: %v", r.JobID, err)
			}
			kept[code] = int64(len(code))
		}
		var want int64
		for _, n := range kept {
			want += n
		}
		requireUsage(t, b, "local", want)
		if err := b.cs.pruneRuns(b.ctx, "local", 0); err != nil {
			t.Fatal(err)
		}
		requireUsage(t, b, "local", 0)
		for _, code := range codes {
			if _, err := b.store.Get(b.ctx, b.cfg.Keys.RunCode("local", sha(code))); !errors.Is(err, statestore.ErrNotFound) {
				t.Fatalf("code still stored with no run left: %v", err)
			}
		}
	})
}

// recordRuns records n runs of code in scope and returns their job ids.
func recordRuns(t *testing.T, cs *CodeStore, scope, code string, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		run := RunInfo{JobID: ulid.Make().String(), Filename: "run.py", Size: int64(len(code)), Time: time.Now().UTC()}
		if err := cs.RecordRun(t.Context(), scope, run, code); err != nil {
			t.Fatalf("RecordRun: %v", err)
		}
		ids = append(ids, run.JobID)
	}
	return ids
}

func requireUsage(t *testing.T, b codeStoreBundle, scope string, want int64) {
	t.Helper()
	n, err := b.cs.Usage(b.ctx, scope)
	if err != nil || n != want {
		t.Fatalf("Usage(%s) = %d, %v; want %d", scope, n, err, want)
	}
}

func requireStorageFull(t *testing.T, err error, says ...string) {
	t.Helper()
	if !errors.Is(err, ErrStorageFull) {
		t.Fatalf("got error %v, want ErrStorageFull", err)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not say %q", err, s)
		}
	}
}

func requireRuns(t *testing.T, cs *CodeStore, scope string, ids ...string) {
	t.Helper()
	runs, err := cs.Runs(t.Context(), scope)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(runs))
	for i, r := range runs {
		got[i] = r.JobID
	}
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Fatalf("runs %v, want %v", got, ids)
	}
}

func bigCode(n int, c byte) string { return strings.Repeat(string(c), n) }

func sha(code string) string {
	s := sha256.Sum256([]byte(code))
	return hex.EncodeToString(s[:])
}

// TestRunCodeBytesStored measures what six runs of the same 16 MiB code
// leave in each store, from outside CodeStore's own counter: the bytes of
// every string under the test's prefix in Redis, and the size of the bbolt
// file. Each copy would add 16 MiB.
func TestRunCodeBytesStored(t *testing.T) {
	t.Parallel()
	const size = 16 << 20
	code := bigCode(size, 'x')
	cfg := Config{Keys: statestore.Keys{Prefix: fmt.Sprintf("bytes%d:", time.Now().UnixNano())}}

	t.Run("Redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		st, err := statestore.NewRedis(t.Context(), statestore.RedisOptions{URL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		recordRuns(t, NewCodeStore(st, cfg), "local", code, 6)
		client := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer client.Close()
		var total int64
		iter := client.Scan(t.Context(), 0, cfg.Keys.Prefix+"*", 100).Iterator()
		for iter.Next(t.Context()) {
			if typ, _ := client.Type(t.Context(), iter.Val()).Result(); typ == "string" {
				total += client.StrLen(t.Context(), iter.Val()).Val()
			}
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		t.Logf("six runs of a %d-byte code: %d bytes of strings in Redis", size, total)
		if total < size || total > size+64 {
			t.Fatalf("six runs of one %d-byte code keep %d bytes of strings, want the code once", size, total)
		}
	})

	t.Run("Bolt", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "state.db")
		st, err := statestore.OpenBolt(path)
		if err != nil {
			t.Fatal(err)
		}
		recordRuns(t, NewCodeStore(st, cfg), "local", code, 6)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		// bbolt grows its file in steps (doubling up to 1 GiB) and keeps
		// freed pages, so the bound is loose: one copy fits well under
		// 4×16 MiB, six copies cannot.
		t.Logf("six runs of a %d-byte code: a %d-byte bbolt file", size, fi.Size())
		if fi.Size() >= 4*size {
			t.Fatalf("six runs of one %d-byte code left a %d-byte bbolt file", size, fi.Size())
		}
	})
}
