package gpu_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/worker/gpu"
	"github.com/codexec/codexec/worker/gpu/gputest"
)

func fakeTree(t *testing.T, gpus ...gputest.GPU) gputest.Tree {
	t.Helper()
	tr, err := gputest.Write(t.TempDir(), gpus, false)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

var h100 = gputest.GPU{Model: "NVIDIA H100 80GB HBM3", MemoryMB: 81559}
var l4 = gputest.GPU{Model: "NVIDIA L4", MemoryMB: 23034}

func TestDiscoverFakeTree(t *testing.T) {
	a100 := gputest.GPU{Model: "NVIDIA A100-SXM4-40GB", MemoryMB: 40960, MIG: []string{"3g.20gb", "1g.5gb"}}
	tr := fakeTree(t, h100, a100, l4)
	inv, err := gpu.Discover(context.Background(), gpu.Config{Root: tr.Root, SMI: tr.SMI})
	if err != nil {
		t.Fatal(err)
	}
	if inv.SMI != tr.SMI {
		t.Errorf("SMI = %q, want the fake %q (notes %v)", inv.SMI, tr.SMI, inv.Notes)
	}
	var got []string
	for _, d := range inv.Devices {
		got = append(got, d.Name()+"|"+d.Model+"|"+d.MIG+"|"+strconv.FormatInt(d.MemoryMB, 10)+"|"+d.Nodes[0].Sandbox)
	}
	want := []string{
		gputest.UUID(0) + "|NVIDIA H100 80GB HBM3||81559|/dev/nvidia0",
		gputest.MIGUUID(1, 0) + "|NVIDIA A100-SXM4-40GB|3g.20gb|20480|/dev/nvidia1",
		gputest.MIGUUID(1, 1) + "|NVIDIA A100-SXM4-40GB|1g.5gb|5120|/dev/nvidia1",
		gputest.UUID(2) + "|NVIDIA L4||23034|/dev/nvidia2",
	}
	if !slices.Equal(got, want) {
		t.Errorf("devices:\n got %q\nwant %q", got, want)
	}
	if d := inv.Devices[0]; d.BusID != "0000:18:00.0" || d.Nodes[0].Host != filepath.Join(tr.Root, "dev/nvidia0") {
		t.Errorf("device 0: bus %q, node %+v", d.BusID, d.Nodes)
	}
	var ctl []string
	for _, n := range inv.Control {
		ctl = append(ctl, n.Sandbox)
	}
	if !slices.Equal(ctl, []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}) {
		t.Errorf("control nodes %q", ctl)
	}
}

func TestDiscoverWithoutSMIReadsTheDriversFiles(t *testing.T) {
	tr := fakeTree(t, h100, l4)
	inv, err := gpu.Discover(context.Background(), gpu.Config{Root: tr.Root, SMI: filepath.Join(t.TempDir(), "absent")})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Devices) != 2 || inv.Devices[1].Model != "NVIDIA L4" || inv.Devices[1].UUID != gputest.UUID(1) || inv.Devices[1].MemoryMB != 0 {
		t.Fatalf("devices %+v", inv.Devices)
	}
	if inv.SMI != "" || len(inv.Notes) == 0 {
		t.Errorf("SMI %q, notes %v: want none used and a note saying so", inv.SMI, inv.Notes)
	}
}

func TestDiscoverNothing(t *testing.T) {
	inv, err := gpu.Discover(context.Background(), gpu.Config{Root: t.TempDir(), SMI: "none"})
	if err != nil || len(inv.Devices) != 0 || len(inv.Control) != 0 {
		t.Fatalf("empty root: %+v, %v", inv, err)
	}
}

func TestDiscoverBoundsAHangingSMI(t *testing.T) {
	tr := fakeTree(t, h100)
	hang := filepath.Join(t.TempDir(), "nvidia-smi")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	inv, err := gpu.Discover(context.Background(), gpu.Config{Root: tr.Root, SMI: hang, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Devices) != 1 || inv.Devices[0].Model != h100.Model || len(inv.Notes) == 0 {
		t.Fatalf("a hanging nvidia-smi: devices %+v, notes %v", inv.Devices, inv.Notes)
	}
}

func TestSelect(t *testing.T) {
	a100 := gputest.GPU{Model: "A100", MemoryMB: 40960, MIG: []string{"1g.5gb", "1g.5gb"}}
	tr := fakeTree(t, h100, a100, l4)
	inv, err := gpu.Discover(context.Background(), gpu.Config{Root: tr.Root, SMI: tr.SMI})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		spec string
		want []string
	}{
		{"all", []string{gputest.UUID(0), gputest.MIGUUID(1, 0), gputest.MIGUUID(1, 1), gputest.UUID(2)}},
		{"none", nil},
		{"0,2", []string{gputest.UUID(0), gputest.UUID(2)}},
		{gputest.UUID(1), []string{gputest.MIGUUID(1, 0), gputest.MIGUUID(1, 1)}},
		{" 2 , " + gputest.MIGUUID(1, 1), []string{gputest.MIGUUID(1, 1), gputest.UUID(2)}},
	} {
		sel, err := gpu.Select(inv.Devices, c.spec)
		if err != nil {
			t.Fatalf("%q: %v", c.spec, err)
		}
		var got []string
		for _, d := range sel {
			got = append(got, d.Name())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("--gpus %q: %q, want %q", c.spec, got, c.want)
		}
	}
	if _, err := gpu.Select(inv.Devices, "0,7"); err == nil {
		t.Error("--gpus naming a device that is not there was accepted")
	}
}

func devices(t *testing.T, gpus ...gputest.GPU) ([]gpu.Device, gputest.Tree) {
	tr := fakeTree(t, gpus...)
	inv, err := gpu.Discover(context.Background(), gpu.Config{Root: tr.Root, SMI: tr.SMI})
	if err != nil {
		t.Fatal(err)
	}
	return inv.Devices, tr
}

func TestAllocatorOneJobPerDeviceInArrivalOrder(t *testing.T) {
	devs, _ := devices(t, h100, h100)
	a := gpu.NewAllocator(devs)
	ctx := context.Background()
	one := envspec.GPURequest{Count: 1}
	l1, err := a.Acquire(ctx, "j1", at(1), one)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := a.Acquire(ctx, "j2", at(2), one)
	if err != nil {
		t.Fatal(err)
	}
	if l1.Devices[0].UUID == l2.Devices[0].UUID {
		t.Fatalf("two jobs got one device: %s", l1.Devices[0].UUID)
	}
	// Both busy: a two-device job waits, and a one-device job that comes
	// after it waits behind it.
	got := make(chan string, 2)
	go func() {
		l, err := a.Acquire(ctx, "j3", at(3), envspec.GPURequest{Count: 2})
		if err == nil {
			got <- "j3"
			l.Release()
		}
	}()
	waitFor(t, func() bool { return a.Waiting() == 1 })
	go func() {
		l, err := a.Acquire(ctx, "j4", at(4), one)
		if err == nil {
			got <- "j4"
			l.Release()
		}
	}()
	waitFor(t, func() bool { return a.Waiting() == 2 })
	l1.Release()
	l1.Release() // twice is once
	if a.Waiting() != 2 {
		t.Fatalf("with one device free, %d waiting: j4 went past j3, or j3 took one device", a.Waiting())
	}
	l2.Release()
	if first, second := <-got, <-got; first != "j3" || second != "j4" {
		t.Fatalf("order %s, %s; want j3, j4", first, second)
	}
	busy := 0
	for _, g := range a.Devices() {
		if g.Busy {
			busy++
		}
	}
	if busy != 0 || a.Waiting() != 0 {
		t.Fatalf("after all released: %d busy, %d waiting", busy, a.Waiting())
	}
}

func TestAllocatorRefusesWhatNeverFits(t *testing.T) {
	devs, _ := devices(t, h100, l4)
	a := gpu.NewAllocator(devs)
	for _, r := range []envspec.GPURequest{{Count: 3}, {Count: 2, MinMemoryMB: 40000}, {Count: 1, Model: "A100"}} {
		if _, err := a.Acquire(context.Background(), "j", at(0), r); !errors.Is(err, gpu.ErrNeverFits) {
			t.Errorf("%s: %v, want ErrNeverFits", r, err)
		}
	}
	l, err := a.Acquire(context.Background(), "j", at(0), envspec.GPURequest{Count: 1, Model: "l4"})
	if err != nil || l.Devices[0].Model != "NVIDIA L4" {
		t.Fatalf("model l4: %+v, %v", l, err)
	}
}

func TestAllocatorWaiterLeavesWhenItsContextEnds(t *testing.T) {
	devs, _ := devices(t, h100)
	a := gpu.NewAllocator(devs)
	l, _ := a.Acquire(context.Background(), "j1", at(1), envspec.GPURequest{Count: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := a.Acquire(ctx, "j2", at(2), envspec.GPURequest{Count: 1})
		done <- err
	}()
	waitFor(t, func() bool { return a.Waiting() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if a.Waiting() != 0 {
		t.Fatal("a cancelled waiter stayed in the queue")
	}
	l.Release()
	if l3, err := a.Acquire(context.Background(), "j3", at(3), envspec.GPURequest{Count: 1}); err != nil || len(l3.Devices) != 1 {
		t.Fatalf("device not free after the cancelled waiter: %v", err)
	}
}

func TestLeaseNodesAndEnv(t *testing.T) {
	devs, tr := devices(t, h100, h100, h100)
	inv, _ := gpu.Discover(context.Background(), gpu.Config{Root: tr.Root, SMI: tr.SMI})
	a := gpu.NewAllocator(devs[1:])
	l, err := a.Acquire(context.Background(), "j", at(0), envspec.GPURequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, n := range l.Nodes(inv.Control) {
		nodes = append(nodes, n.Sandbox)
	}
	if !slices.Equal(nodes, []string{"/dev/nvidia1", "/dev/nvidia2", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}) {
		t.Errorf("nodes %q", nodes)
	}
	want := gputest.UUID(1) + "," + gputest.UUID(2)
	if env := l.Env(); env["CUDA_VISIBLE_DEVICES"] != want || env["NVIDIA_VISIBLE_DEVICES"] != want {
		t.Errorf("env %v, want both %q", env, want)
	}
}

func TestWatchPeak(t *testing.T) {
	_, tr := devices(t, h100, h100)
	if err := tr.SetApps(gputest.UUID(0) + ", 1200\n" + gputest.UUID(0) + ", 300\n" + gputest.UUID(1) + ", 9999\n"); err != nil {
		t.Fatal(err)
	}
	stop := gpu.WatchPeak(tr.SMI, []string{gputest.UUID(0)}, time.Hour)
	if peak, ok := stop(); !ok || peak != 1500 {
		t.Fatalf("peak %d MiB, reported %v; want 1500 (the job's device only), true", peak, ok)
	}
	if peak, ok := gpu.WatchPeak("", []string{gputest.UUID(0)}, time.Hour)(); ok || peak != 0 {
		t.Fatalf("without nvidia-smi: %d, %v; want not reported", peak, ok)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// at is a queueing time, n seconds into a fixed day.
func at(n int) time.Time { return time.Date(2026, 12, 3, 12, 0, n, 0, time.UTC) }

// Waiting jobs are served in the order they were queued, whatever the
// order they reached the allocator in.
func TestAllocatorServesInQueueOrder(t *testing.T) {
	devs, _ := devices(t, h100)
	a := gpu.NewAllocator(devs)
	ctx := context.Background()
	one := envspec.GPURequest{Count: 1}
	l, err := a.Acquire(ctx, "first", at(0), one)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 3)
	for i, job := range []string{"third", "second", "fourth"} {
		queued := map[string]int{"second": 2, "third": 3, "fourth": 4}[job]
		go func() {
			l, err := a.Acquire(ctx, job, at(queued), one)
			if err == nil {
				got <- job
				l.Release()
			}
		}()
		waitFor(t, func() bool { return a.Waiting() == i+1 })
	}
	l.Release()
	for _, want := range []string{"second", "third", "fourth"} {
		if job := <-got; job != want {
			t.Fatalf("served %s, want %s", job, want)
		}
	}
}
