package runner

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// On x86-64 a job's process leaves its address space to a keeper when it
// ends (zygote.py: _keep_address_space), sandboxed or not: the zygote says
// so when it starts, and a zygote that could not make one says it has none.
func TestZygoteJobsLeaveTheirAddressSpaceToAKeeper(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the keeper is x86-64 machine code; this is %s", runtime.GOARCH)
	}
	if !zygote(t).Info().Keeper {
		t.Error("the zygote has no keeper for its jobs' address spaces")
	}
	l := newSandboxLayout(t)
	z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{}, Sandbox: l.cfg})
	if !z.Info().Keeper {
		t.Error("the sandboxed zygote has no keeper for its jobs' address spaces")
	}
}

// Nothing of a job outlives it: its keeper dies with the job's group once
// the zygote has the job's status, so after many jobs the zygote's only
// child is its spare, and no zombie is left.
func TestZygoteJobsLeaveNothingBehind(t *testing.T) {
	b := setup(t)
	z := startZygote(t, ZygoteConfig{Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{}})
	for i := range 20 {
		if out := zrun(t, z, b.spec(t, "print(1)")); out.ExitCode != 0 || string(out.Stdout) != "1\n" {
			t.Fatalf("job %d: exit %d, stdout %q, stderr %q", i, out.ExitCode, out.Stdout, out.Stderr)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		kids := children(t, z.Info().PID)
		var states []string
		for _, k := range kids {
			states = append(states, k+":"+procState(k))
		}
		if len(kids) <= 1 && !strings.Contains(strings.Join(states, " "), ":Z") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 jobs the zygote's children are %v (pid:state); want its spare only", states)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A process that a job started and that left the job's group (a session
// of its own) comes to the zygote when the job's process ends, and the
// zygote reaps it when it dies: it is not left to the worker's namespace's
// init, which may never reap (the worker itself, as a container's pid 1).
func TestZygoteAdoptsWhatAJobLeaves(t *testing.T) {
	b := setup(t)
	z := startZygote(t, ZygoteConfig{Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{}})
	out := zrun(t, z, b.spec(t, `import subprocess, sys
p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)
print(p.pid)`))
	pid, err := strconv.Atoi(strings.TrimSpace(string(out.Stdout)))
	if err != nil {
		t.Fatalf("job printed %q (stderr %q): %v", out.Stdout, out.Stderr, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	var parent string
	deadline := time.Now().Add(10 * time.Second)
	for {
		parent = procField(t, pid, "PPid")
		if parent == strconv.Itoa(z.Info().PID) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // the job's process may not be gone yet
	}
	if want := strconv.Itoa(z.Info().PID); parent != want {
		t.Fatalf("the job's orphan has parent %s, want the zygote (%s)", parent, want)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for procState(strconv.Itoa(pid)) != "" {
		if time.Now().After(deadline) {
			t.Fatalf("the orphan %d, killed, is still %s: the zygote did not reap it", pid, procState(strconv.Itoa(pid)))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// procStat is field i of /proc/<pid>/stat counted from the state letter
// (0; the process group is 2), "" once the process is gone.
func procStat(pid string, i int) string {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) <= i {
		return ""
	}
	return f[i]
}

// procState is the state letter of /proc/<pid>/stat, "" once it is gone.
func procState(pid string) string { return procStat(pid, 0) }

func procField(t *testing.T, pid int, name string) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(rest)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", name, pid)
	return ""
}

// A job's keeper dies with the job's process, not only by the zygote's
// kill of the job's group: a zygote killed after it reported a job's exit
// and before that kill (a worker replacing it, a crash) left the keeper, a
// paused process holding the job's memory, to the host's init, as root and
// unconfined where the zygote was unsandboxed. Here the job stops its
// zygote, so that nothing but the keeper's own parent-death signal can end
// it.
func TestZygoteKeeperDiesWithTheJob(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the keeper is x86-64 machine code; this is %s", runtime.GOARCH)
	}
	b := setup(t)
	z := startZygote(t, ZygoteConfig{Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{}})
	zpid := z.Info().PID
	pidFile := b.dir + "/job.pid"
	s := b.spec(t, fmt.Sprintf("import os, signal\nos.kill(%d, signal.SIGSTOP)\nopen(%q, 'w').write(str(os.getpid()))\n", zpid, pidFile))
	done := make(chan error, 1)
	go func() {
		_, err := z.Run(context.Background(), s)
		done <- err
	}()
	var keepers []string
	t.Cleanup(func() {
		for _, k := range keepers {
			if pid, err := strconv.Atoi(k); err == nil && procState(k) != "" {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = syscall.Kill(zpid, syscall.SIGKILL)
		<-done
	})
	var job string
	deadline := time.Now().Add(20 * time.Second)
	for {
		if data, err := os.ReadFile(pidFile); err == nil && len(data) > 0 && procState(string(data)) == "Z" {
			job = string(data)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job's process did not end with its zygote stopped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The stopped zygote adopted the keeper when the job's process ended:
	// its child in the job's process group, besides the job's process.
	for _, k := range children(t, zpid) {
		if k != job && procStat(k, 2) == job {
			keepers = append(keepers, k)
		}
	}
	if len(keepers) == 0 {
		t.Fatalf("no keeper among the stopped zygote's children %v", children(t, zpid))
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		var alive []string
		for _, k := range keepers {
			if st := procState(k); st != "" && st != "Z" {
				alive = append(alive, k+":"+st)
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job's process ended, and its keepers %v (pid:state) did not", alive)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
