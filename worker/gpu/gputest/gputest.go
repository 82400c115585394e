// Package gputest writes fake NVIDIA device trees for tests: device nodes,
// the driver's information files and an nvidia-smi script that answers
// from files, as worker/gpu.Discover reads a real machine's.
package gputest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// GPU is one fake GPU. MIG, when set, lists the profiles of its MIG
// instances ("1g.10gb").
type GPU struct {
	Model    string
	MemoryMB int64
	MIG      []string
}

// Tree is a fake machine written under Root.
type Tree struct {
	// Root holds dev/ and proc/driver/nvidia/ (worker/gpu.Config.Root).
	Root string
	// SMI is the fake nvidia-smi (worker/gpu.Config.SMI).
	SMI string
}

// UUID is the fake UUID of GPU i.
func UUID(i int) string { return fmt.Sprintf("GPU-00000000-0000-4000-8000-%012d", i) }

// MIGUUID is the fake UUID of MIG instance j of GPU i.
func MIGUUID(i, j int) string { return fmt.Sprintf("MIG-00000000-0000-4000-9000-%06d%06d", i, j) }

// Write makes a fake tree under dir with gpus. With nodes true the device
// nodes are character devices with /dev/null's numbers (mknod: root
// only), which a sandbox binds and a job opens as devices; otherwise they
// are empty files.
func Write(dir string, gpus []GPU, nodes bool) (Tree, error) {
	t := Tree{Root: filepath.Join(dir, "root"), SMI: filepath.Join(dir, "smi", "nvidia-smi")}
	for _, d := range []string{"dev", "proc/driver/nvidia/gpus", "../smi"} {
		if err := os.MkdirAll(filepath.Join(t.Root, d), 0o755); err != nil {
			return Tree{}, err
		}
	}
	names := []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}
	for i := range gpus {
		names = append(names, fmt.Sprintf("nvidia%d", i))
	}
	for _, n := range names {
		if err := node(filepath.Join(t.Root, "dev", n), nodes); err != nil {
			return Tree{}, err
		}
	}
	var query, list strings.Builder
	for i, g := range gpus {
		bus := fmt.Sprintf("0000:%02x:00.0", 0x18+i)
		info := fmt.Sprintf("Model: \t\t %s\nIRQ:   \t\t 0\nGPU UUID: \t %s\nVideo BIOS: \t ??.??.??.??.??\nBus Type: \t PCIe\nDMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\nBus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t No\n",
			g.Model, UUID(i), bus, i)
		d := filepath.Join(t.Root, "proc/driver/nvidia/gpus", bus)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return Tree{}, err
		}
		if err := os.WriteFile(filepath.Join(d, "information"), []byte(info), 0o644); err != nil {
			return Tree{}, err
		}
		fmt.Fprintf(&query, "%d, %s, %s, %d, 0000%s\n", i, UUID(i), g.Model, g.MemoryMB, bus)
		fmt.Fprintf(&list, "GPU %d: %s (UUID: %s)\n", i, g.Model, UUID(i))
		for j, p := range g.MIG {
			fmt.Fprintf(&list, "  MIG %-13s Device %2d: (UUID: %s)\n", p, j, MIGUUID(i, j))
		}
	}
	smiDir := filepath.Dir(t.SMI)
	files := map[string]string{"query.txt": query.String(), "list.txt": list.String(), "apps.txt": "", "nvidia-smi": smiScript}
	for name, content := range files {
		mode := os.FileMode(0o644)
		if name == "nvidia-smi" {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(smiDir, name), []byte(content), mode); err != nil {
			return Tree{}, err
		}
	}
	return t, nil
}

// SetApps makes the fake nvidia-smi report compute processes: lines of
// "gpu_uuid, used_memory_mib".
func (t Tree) SetApps(lines string) error {
	return os.WriteFile(filepath.Join(filepath.Dir(t.SMI), "apps.txt"), []byte(lines), 0o644)
}

// smiScript answers the queries worker/gpu makes from the files beside it.
const smiScript = `#!/bin/sh
d=$(dirname "$0")
case "$1" in
-L) exec cat "$d/list.txt" ;;
--query-gpu=index,uuid,name,memory.total,pci.bus_id) exec cat "$d/query.txt" ;;
--query-compute-apps=gpu_uuid,used_memory) exec cat "$d/apps.txt" ;;
esac
echo "fake nvidia-smi: unexpected arguments: $*" >&2
exit 2
`

// node makes a fake device node readable and writable by all, as the
// driver's are (whatever the umask).
func node(path string, dev bool) error {
	var err error
	if dev {
		err = unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
	} else {
		err = os.WriteFile(path, nil, 0o666)
	}
	if err != nil {
		return err
	}
	return os.Chmod(path, 0o666)
}
