package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
)

// A collected workspace leaves every worker of the cluster. Its session
// writes a file on one worker, then, that worker stopped, reads it on the
// other (which restores it): both keep the workspace's directories (and,
// with session file systems, a disk image each). One worker stopped again,
// `codexec admin gc` collects the workspace: the running worker removes
// its copy at once, the stopped one when it starts again; the session's
// next call starts from an empty directory.
func TestClusterCollectedWorkspaceLeavesEveryWorker(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 2)
	c := httpClient(t, cl.mcpURL)
	res, er := call(t, c, "execute_code", map[string]any{"code": "open('note.txt', 'w').write('kept')"})
	if res.IsError {
		t.Fatalf("write: %+v", er)
	}
	first := workerIndex(t, er.WorkerID)
	dirs := []string{e2e.DataDirOf(nil, cl.workers[0].Cmd.Env), e2e.DataDirOf(nil, cl.workers[1].Cmd.Env)}
	scope := onlySession(t, dirs[first])

	cl.workers[first].Stop(stopGrace)
	found, on := readNote(t, c, 1)
	if found != 1 || on[er.WorkerID] != 0 {
		t.Fatalf("the read after %s stopped: found %d, ran on %v", er.WorkerID, found, on)
	}
	cl.restartWorker(t, first)
	var kept [2][]string
	for i, d := range dirs {
		kept[i] = keptOf(d, scope)
		if len(kept[i]) == 0 {
			t.Fatalf("worker w%d keeps nothing of %s before the collection", i+1, scope)
		}
	}

	t.Logf("kept before the collection: %v", kept)
	other := 1 - first
	cl.workers[other].Stop(stopGrace)
	if out := runCodexec(t, codexecEnv(), "admin", "gc", "--redis", cl.redisURL, "--older-than", "1ns"); !strings.Contains(out, "removed 1 workspaces") {
		t.Fatalf("admin gc:\n%s", out)
	}
	waitAllGone(t, kept[first])
	for _, p := range kept[other] {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s, of the stopped worker, before it started again: %v", p, err)
		}
	}
	cl.restartWorker(t, other)
	for _, p := range kept[other] {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after its worker started again: %v", p, err)
		}
	}
	if found, on := readNote(t, c, 1); found != 0 {
		t.Errorf("the session's call after the collection found the collected file (ran on %v)", on)
	}
}

// workerIndex is the index in cluster.workers of the worker named id.
func workerIndex(t *testing.T, id string) int {
	t.Helper()
	var i int
	if _, err := fmt.Sscanf(id, "w%d", &i); err != nil || i < 1 || i > 2 {
		t.Fatalf("the job ran on %q", id)
	}
	return i - 1
}

// onlySession is the one session directory of the worker whose data
// directory is dir.
func onlySession(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "sessions"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("sessions of %s: %v, %v", dir, entries, err)
	}
	return entries[0].Name()
}

// keptOf is what the worker whose data directory is dir keeps of scope.
func keptOf(dir, scope string) []string {
	var kept []string
	for _, p := range []string{filepath.Join("sessions", scope), filepath.Join("scripts", scope),
		filepath.Join("disks", scope+".img"), filepath.Join("workspaces", scope+".json")} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			kept = append(kept, filepath.Join(dir, p))
		}
	}
	return kept
}

func waitAllGone(t *testing.T, paths []string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for _, p := range paths {
		for {
			_, err := os.Lstat(p)
			if errors.Is(err, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still there: %v", p, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// restartWorker starts worker i of the cluster again, as it was started.
func (cl *cluster) restartWorker(t *testing.T, i int) {
	t.Helper()
	old := cl.workers[i]
	cl.workers[i] = &proc{startWorker(t, fmt.Sprintf("worker w%d", i+1), old.Cmd.Env, old.Cmd.Args[2:]...)}
}

// In `codexec dev` the frontend's periodic collection (--gc-every) of a
// workspace unused for --workspace-ttl removes its directories and disk
// image too; the session's next call starts from an empty directory.
func TestDevCollectedWorkspaceLeavesTheDataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c, _ := devStdio(t, dir, "CODEXEC_WORKSPACE_TTL=1s", "CODEXEC_GC_EVERY=300ms")
	res, er := call(t, c, "execute_code", map[string]any{"code": "open('note.txt', 'w').write('kept')"})
	if res.IsError {
		t.Fatalf("write: %+v", er)
	}
	kept := keptOf(dir, onlySession(t, dir))
	if len(kept) == 0 {
		t.Fatal("the session keeps nothing in the data directory")
	}
	t.Logf("kept before the collection: %v", kept)
	waitAllGone(t, kept)
	if found, _ := readNote(t, c, 1); found != 0 {
		t.Error("the session's call after the collection found the collected file")
	}
}
