package codefiles

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/statestore/redistest"
	"github.com/oklog/ulid/v2"
)

// The CodeStore suite runs against a real redis-server and the embedded
// bbolt store. Subtests isolate themselves by key prefix, so one Redis
// serves them all in parallel.

type newStoreFunc func(t *testing.T) statestore.Store

var prefixSeq atomic.Int64

// codeStoreBundle is what each subtest starts from: one store, and a way to
// get more CodeStores over it (standing in for several frontends).
type codeStoreBundle struct {
	ctx   context.Context
	cfg   Config
	store statestore.Store
	cs    *CodeStore
	// another opens a second connection to the same state (Redis) or
	// shares the one store (bbolt, which one process holds).
	another func() *CodeStore
}

func setupCodeStore(t *testing.T, newStore newStoreFunc, cfg Config) codeStoreBundle {
	t.Helper()
	cfg.Keys = statestore.Keys{Prefix: fmt.Sprintf("cs%d:%d:", time.Now().UnixNano(), prefixSeq.Add(1))}
	st := newStore(t)
	b := codeStoreBundle{ctx: t.Context(), store: st, cs: NewCodeStore(st, cfg)}
	b.cfg = b.cs.cfg
	b.another = func() *CodeStore {
		if _, ok := st.(*statestore.RedisStore); ok {
			return NewCodeStore(newStore(t), cfg)
		}
		return NewCodeStore(st, cfg)
	}
	return b
}

func TestCodeStoreRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	runCodeStoreSuite(t, func(t *testing.T) statestore.Store {
		s, err := statestore.NewRedis(t.Context(), statestore.RedisOptions{URL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestCodeStoreBolt(t *testing.T) {
	t.Parallel()
	runCodeStoreSuite(t, func(t *testing.T) statestore.Store {
		s, err := statestore.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func runCodeStoreSuite(t *testing.T, newStore newStoreFunc) {
	runStorageSuite(t, newStore)
	t.Run("InitAppendReadListDelete", func(t *testing.T) {
		t.Parallel()
		b := setupCodeStore(t, newStore, Config{})
		info, replaced, _, err := b.cs.Init(b.ctx, "local", "main.py", "a = 1\n")
		if err != nil || replaced || info.Size != 6 {
			t.Fatalf("Init = %+v, %v, %v", info, replaced, err)
		}
		for i := range 3 {
			if info, err = b.cs.Append(b.ctx, "local", "main.py", fmt.Sprintf("a += %d\n", i)); err != nil {
				t.Fatal(err)
			}
		}
		want := "a = 1\na += 0\na += 1\na += 2\n"
		if info.Size != int64(len(want)) {
			t.Fatalf("size after appends %d, want %d", info.Size, len(want))
		}
		requireContent(t, b.cs, "local", "main.py", want)
		if _, _, _, err := b.cs.Init(b.ctx, "local", "empty.py", ""); err != nil {
			t.Fatal(err)
		}
		requireContent(t, b.cs, "local", "empty.py", "")
		files, err := b.cs.List(b.ctx, "local")
		if err != nil || len(files) != 2 || files[0].Name != "empty.py" || files[1].Name != "main.py" || files[1].Size != int64(len(want)) {
			t.Fatalf("List = %+v, %v", files, err)
		}
		if files[1].Created.IsZero() || files[1].Updated.Before(files[1].Created) {
			t.Fatalf("timestamps %+v", files[1])
		}

		// initialize of an existing name replaces it.
		info, replaced, old, err := b.cs.Init(b.ctx, "local", "main.py", "b = 2\n")
		if err != nil || !replaced || old != int64(len(want)) || info.Size != 6 {
			t.Fatalf("Init over an existing file = %+v, %v, %d, %v", info, replaced, old, err)
		}
		requireContent(t, b.cs, "local", "main.py", "b = 2\n")

		size, err := b.cs.Delete(b.ctx, "local", "main.py")
		if err != nil || size != 6 {
			t.Fatalf("Delete = %d, %v", size, err)
		}
		for _, err := range []error{
			second(b.cs.Delete(b.ctx, "local", "main.py")),
			second(b.cs.Append(b.ctx, "local", "main.py", "x")),
			third(b.cs.Read(b.ctx, "local", "main.py")),
		} {
			if !errors.Is(err, ErrFileNotFound) {
				t.Fatalf("after Delete: %v, want ErrFileNotFound", err)
			}
		}
		if files, _ := b.cs.List(b.ctx, "local"); len(files) != 1 {
			t.Fatalf("List after Delete = %+v", files)
		}
		scopes, err := b.cs.Scopes(b.ctx)
		if err != nil || len(scopes) != 1 || scopes[0] != "local" {
			t.Fatalf("Scopes = %v, %v", scopes, err)
		}
	})

	t.Run("SessionsAreIsolated", func(t *testing.T) {
		t.Parallel()
		b := setupCodeStore(t, newStore, Config{})
		if _, _, _, err := b.cs.Init(b.ctx, "s-aaaa", "secret.py", "token = 'a'\n"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.cs.Read(b.ctx, "s-bbbb", "secret.py"); !errors.Is(err, ErrFileNotFound) {
			t.Fatalf("another session read the file: %v", err)
		}
		if _, err := b.cs.Append(b.ctx, "s-bbbb", "secret.py", "x"); !errors.Is(err, ErrFileNotFound) {
			t.Fatalf("another session appended: %v", err)
		}
		if files, _ := b.cs.List(b.ctx, "s-bbbb"); len(files) != 0 {
			t.Fatalf("another session lists %+v", files)
		}
		requireContent(t, b.cs, "s-aaaa", "secret.py", "token = 'a'\n")
	})

	t.Run("Limits", func(t *testing.T) {
		t.Parallel()
		b := setupCodeStore(t, newStore, Config{MaxFileBytes: 10, MaxFiles: 2})
		if _, _, _, err := b.cs.Init(b.ctx, "local", "big.py", "12345678901"); !errors.Is(err, ErrFileTooLarge) {
			t.Fatalf("Init past the size limit: %v", err)
		}
		if _, _, _, err := b.cs.Init(b.ctx, "local", "a.py", "12345"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.cs.Append(b.ctx, "local", "a.py", "67890"); err != nil {
			t.Fatalf("Append up to exactly the limit: %v", err)
		}
		_, err := b.cs.Append(b.ctx, "local", "a.py", "x")
		if !errors.Is(err, ErrFileTooLarge) || !strings.Contains(err.Error(), "limit is 10 bytes") {
			t.Fatalf("Append past the limit: %v", err)
		}
		requireContent(t, b.cs, "local", "a.py", "1234567890")
		if _, _, _, err := b.cs.Init(b.ctx, "local", "b.py", ""); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := b.cs.Init(b.ctx, "local", "c.py", ""); !errors.Is(err, ErrTooManyFiles) {
			t.Fatalf("a third file: %v", err)
		}
		// Replacing an existing file is not a new file.
		if _, _, _, err := b.cs.Init(b.ctx, "local", "b.py", "x"); err != nil {
			t.Fatalf("replacing at the count limit: %v", err)
		}
		// Another session has its own count.
		if _, _, _, err := b.cs.Init(b.ctx, "other", "c.py", ""); err != nil {
			t.Fatal(err)
		}
	})

	// Several frontends (each its own connection) append to one file at
	// once: every piece lands exactly once and whole.
	t.Run("ConcurrentAppendsFromSeveralFrontends", func(t *testing.T) {
		t.Parallel()
		b := setupCodeStore(t, newStore, Config{})
		if _, _, _, err := b.cs.Init(b.ctx, "shared", "f.py", ""); err != nil {
			t.Fatal(err)
		}
		const frontends, each = 4, 40
		var wg sync.WaitGroup
		errs := make(chan error, frontends*each)
		for i := range frontends {
			cs := b.another()
			wg.Go(func() {
				for j := range each {
					if _, err := cs.Append(b.ctx, "shared", "f.py", fmt.Sprintf("# frontend %d piece %03d %s\n", i, j, strings.Repeat("x", 200))); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		content, _, err := b.cs.Read(b.ctx, "shared", "f.py")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(content, "\n"), "\n")
		if len(lines) != frontends*each {
			t.Fatalf("%d lines, want %d", len(lines), frontends*each)
		}
		seen := map[string]bool{}
		for _, l := range lines {
			if seen[l] || !strings.HasPrefix(l, "# frontend ") {
				t.Fatalf("duplicate or torn line %q", l)
			}
			seen[l] = true
		}
	})

	t.Run("Runs", func(t *testing.T) {
		t.Parallel()
		b := setupCodeStore(t, newStore, Config{RunHistory: 10})
		var ids []string
		for i := range 25 {
			id := ulid.Make().String()
			ids = append(ids, id)
			run := RunInfo{JobID: id, Filename: "script.py", Size: 9, Time: time.Now().UTC()}
			if i%2 == 1 {
				run.SourceFile = "main.py"
			}
			if err := b.cs.RecordRun(b.ctx, "local", run, fmt.Sprintf("print(%d)", i)); err != nil {
				t.Fatal(err)
			}
		}
		runs, err := b.cs.Runs(b.ctx, "local")
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) > 10 || len(runs) < 9 || runs[0].JobID != ids[24] {
			t.Fatalf("%d runs kept (want 9 or 10, newest first), first %+v", len(runs), runs[0])
		}
		for i := 1; i < len(runs); i++ {
			if runs[i].JobID >= runs[i-1].JobID {
				t.Fatal("runs not newest first")
			}
		}
		code, run, err := b.cs.ReadRun(b.ctx, "local", ids[23])
		if err != nil || code != "print(23)" || run.SourceFile != "main.py" {
			t.Fatalf("ReadRun = %q, %+v, %v", code, run, err)
		}
		for _, id := range []string{ids[0], "not-a-ulid", "../../x"} {
			if _, _, err := b.cs.ReadRun(b.ctx, "local", id); !errors.Is(err, ErrRunNotFound) {
				t.Errorf("ReadRun(%q): %v, want ErrRunNotFound", id, err)
			}
		}
		if _, _, err := b.cs.ReadRun(b.ctx, "other", ids[24]); !errors.Is(err, ErrRunNotFound) {
			t.Fatalf("another session read a run: %v", err)
		}
	})

	t.Run("LastWriteRecordedOncePerMinute", func(t *testing.T) {
		t.Parallel()
		b := setupCodeStore(t, newStore, Config{})
		record := func() {
			t.Helper()
			run := RunInfo{JobID: ulid.Make().String(), Filename: "a.py", Time: time.Now().UTC()}
			if err := b.cs.RecordRun(b.ctx, "local", run, "print(1)"); err != nil {
				t.Fatal(err)
			}
		}
		setLast := func(at time.Time) {
			t.Helper()
			if err := b.store.HSet(b.ctx, b.cfg.Keys.Scopes(), "local", fmt.Appendf(nil, "%d", at.UnixMilli())); err != nil {
				t.Fatal(err)
			}
		}
		last := func() time.Time {
			t.Helper()
			w, err := b.cs.LastWrites(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			return w["local"]
		}
		record()
		if since := time.Since(last()); since < 0 || since > scopeTouchEvery {
			t.Fatalf("last write %s ago after a run", since)
		}
		recent := time.Now().Add(-scopeTouchEvery / 2).Truncate(time.Millisecond)
		setLast(recent)
		record()
		if got := last(); !got.Equal(recent) {
			t.Errorf("a run rewrote a last write %s old (now %s): one write per run", scopeTouchEvery/2, got)
		}
		stale := time.Now().Add(-2 * scopeTouchEvery)
		setLast(stale)
		record()
		if since := time.Since(last()); since > scopeTouchEvery/2 {
			t.Errorf("last write %s ago after a run that found it %s old", since, 2*scopeTouchEvery)
		}
		if err := b.store.HDel(b.ctx, b.cfg.Keys.Scopes(), "local"); err != nil {
			t.Fatal(err)
		}
		record()
		if last().IsZero() {
			t.Error("a run after the scope's entry was deleted did not record it again")
		}
	})

	t.Run("RunRetention", func(t *testing.T) {
		t.Parallel()
		b := setupCodeStore(t, newStore, Config{RunRetention: 200 * time.Millisecond})
		old := RunInfo{JobID: ulid.Make().String(), Filename: "a.py", Time: time.Now().UTC()}
		if err := b.cs.RecordRun(b.ctx, "local", old, "print(1)"); err != nil {
			t.Fatal(err)
		}
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
				t.Fatalf("run outlived its retention: %+v", runs)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if _, _, err := b.cs.ReadRun(b.ctx, "local", old.JobID); !errors.Is(err, ErrRunNotFound) {
			t.Fatalf("expired run still readable: %v", err)
		}
	})

	t.Run("Mirror", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		b := setupCodeStore(t, newStore, Config{MirrorDir: dir})
		info, _, _, err := b.cs.Init(b.ctx, "local", "m.py", "start\n")
		if err != nil || info.Warning != "" {
			t.Fatal(err, info.Warning)
		}
		disk := filepath.Join(dir, "local", "files", "m.py")
		if info.Path != disk {
			t.Fatalf("Path %q, want %q", info.Path, disk)
		}
		var wg sync.WaitGroup
		// Enough concurrent appends that some find the copy behind and
		// rewrite it whole while others extend it.
		for i := range 16 {
			wg.Go(func() {
				for j := range 25 {
					if _, err := b.cs.Append(b.ctx, "local", "m.py", fmt.Sprintf("%d-%d %s\n", i, j, strings.Repeat("x", (i*7+j)%50))); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		content, _, _ := b.cs.Read(b.ctx, "local", "m.py")
		got, err := os.ReadFile(disk)
		if err != nil || string(got) != content {
			t.Fatalf("on-disk copy differs from the store (%v):\n%q\n%q", err, got, content)
		}
		// A copy that fell behind (deleted on disk) is rewritten whole.
		if err := os.Remove(disk); err != nil {
			t.Fatal(err)
		}
		if _, err := b.cs.Append(b.ctx, "local", "m.py", "end\n"); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(disk); string(got) != content+"end\n" {
			t.Fatalf("copy not restored: %q", got)
		}
		// A link planted in place of the copy is replaced, never followed.
		target := filepath.Join(t.TempDir(), "target")
		if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(disk); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, disk); err != nil {
			t.Fatal(err)
		}
		if _, err := b.cs.Append(b.ctx, "local", "m.py", "more\n"); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(target); string(got) != "keep" {
			t.Fatalf("append wrote through a link: %q", got)
		}
		if fi, err := os.Lstat(disk); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("copy is not a plain file: %v %v", fi, err)
		}
		// A session directory replaced by a link: the store still works, the
		// copy is refused with a warning.
		if err := os.Symlink(t.TempDir(), filepath.Join(dir, "evil")); err != nil {
			t.Fatal(err)
		}
		info, _, _, err = b.cs.Init(b.ctx, "evil", "x.py", "x")
		if err != nil || info.Warning == "" {
			t.Fatalf("Init under a linked session directory: %+v, %v", info, err)
		}
		if _, err := b.cs.Delete(b.ctx, "local", "m.py"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(disk); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("copy not removed with the file: %v", err)
		}
	})
}

// TestCodeStoreBoltRestart: code files and runs survive closing and
// reopening the embedded store, as across a restart of `codexec dev`.
func TestCodeStoreBoltRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	open := func() (statestore.Store, *CodeStore) {
		st, err := statestore.OpenBolt(path)
		if err != nil {
			t.Fatal(err)
		}
		return st, NewCodeStore(st, Config{})
	}
	st, cs := open()
	ctx := t.Context()
	if _, _, _, err := cs.Init(ctx, "local", "r.py", "one\n"); err != nil {
		t.Fatal(err)
	}
	id := ulid.Make().String()
	if err := cs.RecordRun(ctx, "local", RunInfo{JobID: id, Filename: "r.py", Time: time.Now()}, "ran"); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, cs = open()
	defer st.Close()
	if _, err := cs.Append(ctx, "local", "r.py", "two\n"); err != nil {
		t.Fatal(err)
	}
	requireContent(t, cs, "local", "r.py", "one\ntwo\n")
	if code, _, err := cs.ReadRun(ctx, "local", id); err != nil || code != "ran" {
		t.Fatalf("run after restart: %q, %v", code, err)
	}
}

func requireContent(t *testing.T, cs *CodeStore, scope, name, want string) {
	t.Helper()
	got, info, err := cs.Read(t.Context(), scope, name)
	if err != nil {
		t.Fatalf("Read %s: %v", name, err)
	}
	if !bytes.Equal([]byte(got), []byte(want)) || info.Size != int64(len(want)) {
		t.Fatalf("Read %s = %q (size %d), want %q", name, got, info.Size, want)
	}
}

func second[A any](_ A, err error) error        { return err }
func third[A, B any](_ A, _ B, err error) error { return err }
