package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/cgroup"
	"github.com/codexec/codexec/worker/limits"
	"github.com/codexec/codexec/worker/runner"
)

func TestDiskUsageCountsBlocksAndFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	// Sparse: a large size, almost no blocks.
	f, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for i := range 100 {
		if err := os.WriteFile(filepath.Join(dir, "empty-"+string(rune('a'+i%26))+string(rune('a'+i/26))), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A link to something big outside is not followed.
	if err := os.Symlink("/usr", filepath.Join(dir, "usr")); err != nil {
		t.Fatal(err)
	}
	got := DiskUsage(dir)
	low := int64(1<<20) + 100*minFileUsage
	if got < low || got > low+(1<<20) {
		t.Fatalf("DiskUsage = %d, want about %d (1 MiB of data, 100 empty files at %d each, a sparse file, a link)", got, low, minFileUsage)
	}
}

func TestWatchDiskCancelsPastTheLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan struct{})
	go func() { watchDisk(ctx, cancel, dir, 1<<20, 10*time.Millisecond); close(done) }()
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not notice 2 MiB past a 1 MiB limit")
	}
	if !errors.Is(context.Cause(ctx), errDiskLimit) {
		t.Fatalf("cause %v, want errDiskLimit", context.Cause(ctx))
	}
}

func TestCgroupName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"w1.123": "w1.123", "vm-abc": "vm-abc", "bad/name": "", "": ""} {
		if got := cgroupName(in); got != want {
			t.Errorf("cgroupName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLimitHitNamesTheLimitFromEvidence(t *testing.T) {
	t.Parallel()
	set := limits.Set{Memory: 256 << 20, CPU: 5 * time.Second, Procs: 64, FileSize: 8 << 20, Disk: 32 << 20, OpenFiles: 100}
	bigDisk := set
	bigDisk.Disk = 1 << 30
	bigFiles := set
	bigFiles.FileSize = 1 << 30 // the disk limit is the smaller: it caps files too
	cases := []struct {
		name     string
		out      runner.Outcome
		usage    cgroup.Usage
		set      limits.Set
		cgMemory bool
		want     string
	}{
		{"oom kill", runner.Outcome{ExitCode: -1, Signal: "killed"}, cgroup.Usage{OOMKills: 1}, set, true, wire.LimitMemory},
		{"sigxcpu", runner.Outcome{ExitCode: -1, Signal: syscall.SIGXCPU.String()}, cgroup.Usage{}, set, true, wire.LimitCPU},
		{"pids.max", runner.Outcome{ExitCode: 1}, cgroup.Usage{PidsMaxHits: 3}, set, true, wire.LimitProcesses},
		{"MemoryError under RLIMIT_AS", runner.Outcome{ExitCode: 1, Stderr: []byte("MemoryError\n")}, cgroup.Usage{}, set, false, wire.LimitMemory},
		{"MemoryError with a cgroup is the job's", runner.Outcome{ExitCode: 1, Stderr: []byte("MemoryError\n")}, cgroup.Usage{}, set, true, ""},
		{"EFBIG under the disk limit", runner.Outcome{ExitCode: 1, Stderr: []byte("OSError: [Errno 27] File too large\n")}, cgroup.Usage{}, bigFiles, true, wire.LimitDisk},
		{"EFBIG under the file size limit", runner.Outcome{ExitCode: 1, Stderr: []byte("OSError: [Errno 27] File too large\n")}, cgroup.Usage{}, bigDisk, true, wire.LimitFileSize},
		{"EMFILE", runner.Outcome{ExitCode: 1, Stderr: []byte("OSError: [Errno 24] Too many open files: 'x'\n")}, cgroup.Usage{}, set, true, wire.LimitOpenFiles},
		{"EAGAIN on fork", runner.Outcome{ExitCode: 1, Stderr: []byte("os.fork()\nBlockingIOError: [Errno 11] Resource temporarily unavailable\n")}, cgroup.Usage{}, set, false, wire.LimitProcesses},
		{"an ordinary failure", runner.Outcome{ExitCode: 1, Stderr: []byte("ValueError: nope\n")}, cgroup.Usage{}, set, true, ""},
		{"SIGKILL from the job itself", runner.Outcome{ExitCode: -1, Signal: "killed"}, cgroup.Usage{}, set, true, ""},
	}
	for _, c := range cases {
		if got, msg := limitHit(c.out, c.usage, c.set, c.cgMemory); got != c.want || (got != "" && msg == "") {
			t.Errorf("%s: limit %q (%q), want %q", c.name, got, msg, c.want)
		}
	}
}
