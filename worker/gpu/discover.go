package gpu

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/codexec/codexec/envspec"
)

// Config says where a worker looks for its GPUs.
type Config struct {
	// Root is the directory the device tree (dev/) and the driver's files
	// (proc/driver/nvidia/) are read under: "/" on a real machine, a
	// fixture in tests. Default "/".
	Root string
	// SMI is the nvidia-smi to ask for models, memory and MIG instances:
	// a path or a name on PATH; "none" asks nothing. Default
	// "nvidia-smi"; one that is not found is not an error (the device
	// tree and the driver's files still say what there is).
	SMI string
	// Timeout bounds each run of SMI. Default 10 s.
	Timeout time.Duration
}

// Device is one device a worker can lease to a job: its description, and
// the device nodes a job that holds it must see.
type Device struct {
	envspec.GPU
	// Nodes are the device's own nodes (host paths under Config.Root).
	Nodes []Node
	// parent is a MIG instance's GPU's UUID.
	parent string
}

// Node is a device node as it lies on the host (Host, under Config.Root)
// and as a job sees it (Sandbox, under /dev).
type Node struct {
	Host, Sandbox string
}

// Inventory is what Discover found.
type Inventory struct {
	// Devices are the leasable devices, sorted by index (MIG instances of
	// one GPU in nvidia-smi's order).
	Devices []Device
	// Control are the driver's nodes every GPU job needs (nvidiactl,
	// nvidia-uvm, nvidia-uvm-tools, nvidia-modeset), those present.
	Control []Node
	// SMI is the nvidia-smi used, "" when none was.
	SMI string
	// Notes say what was not found or could not be read, for the log.
	Notes []string
}

// controlNodes are the driver's nodes shared by every GPU job.
var controlNodes = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}

var gpuNodeRe = regexp.MustCompile(`^nvidia([0-9]+)$`)

// Discover finds the NVIDIA GPUs under cfg.Root: the device nodes
// dev/nvidia<N>, the driver's description of each in
// proc/driver/nvidia/gpus/*/information (model, UUID, bus, minor number),
// and nvidia-smi's (index, UUID, model, memory, bus; MIG instances from
// nvidia-smi -L). Nothing found is an empty inventory, not an error; a
// device node without a description is offered with what is known.
func Discover(ctx context.Context, cfg Config) (Inventory, error) {
	root := cfg.Root
	if root == "" {
		root = "/"
	}
	var inv Inventory
	minors, err := deviceMinors(root)
	if err != nil {
		return Inventory{}, err
	}
	for _, name := range controlNodes {
		p := filepath.Join(root, "dev", name)
		if _, err := os.Stat(p); err == nil {
			inv.Control = append(inv.Control, Node{Host: p, Sandbox: "/dev/" + name})
		}
	}
	byMinor := procInfo(root, &inv)
	smi, mig := querySMI(ctx, cfg, &inv)
	inv.Devices = merge(root, minors, byMinor, smi, mig)
	if len(inv.Devices) > 0 && !slices.ContainsFunc(inv.Control, func(n Node) bool { return n.Sandbox == "/dev/nvidiactl" }) {
		inv.Notes = append(inv.Notes, "no /dev/nvidiactl: jobs will see their GPU nodes but CUDA needs the control node")
	}
	return inv, nil
}

// deviceMinors lists the minor numbers of the dev/nvidia<N> nodes.
func deviceMinors(root string) ([]int, error) {
	entries, err := os.ReadDir(filepath.Join(root, "dev"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	var minors []int
	for _, e := range entries {
		if m := gpuNodeRe.FindStringSubmatch(e.Name()); m != nil {
			n, _ := strconv.Atoi(m[1])
			minors = append(minors, n)
		}
	}
	slices.Sort(minors)
	return minors, nil
}

// procGPU is one proc/driver/nvidia/gpus/<bus>/information file.
type procGPU struct {
	model, uuid, bus string
	minor            int
}

// procInfo reads the driver's description of each GPU, by minor number.
func procInfo(root string, inv *Inventory) map[int]procGPU {
	dirs, err := filepath.Glob(filepath.Join(root, "proc/driver/nvidia/gpus/*/information"))
	if err != nil || len(dirs) == 0 {
		return nil
	}
	out := map[int]procGPU{}
	for _, f := range dirs {
		data, err := os.ReadFile(f)
		if err != nil {
			inv.Notes = append(inv.Notes, err.Error())
			continue
		}
		g := procGPU{minor: -1}
		for _, line := range strings.Split(string(data), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			switch strings.TrimSpace(k) {
			case "Model":
				g.model = v
			case "GPU UUID":
				g.uuid = v
			case "Bus Location":
				g.bus = v
			case "Device Minor":
				if n, err := strconv.Atoi(v); err == nil {
					g.minor = n
				}
			}
		}
		if g.minor >= 0 {
			out[g.minor] = g
		}
	}
	return out
}

// smiGPU is one line of nvidia-smi --query-gpu.
type smiGPU struct {
	index    int
	uuid     string
	name     string
	memoryMB int64
	bus      string
}

// smiMIG is one MIG instance of nvidia-smi -L.
type smiMIG struct {
	parentUUID, profile, uuid string
}

// querySMI asks nvidia-smi, when there is one, for every GPU and every
// MIG instance.
func querySMI(ctx context.Context, cfg Config, inv *Inventory) ([]smiGPU, []smiMIG) {
	name := cfg.SMI
	if name == "" {
		name = "nvidia-smi"
	}
	if name == "none" {
		return nil, nil
	}
	path, err := exec.LookPath(name)
	if err != nil {
		inv.Notes = append(inv.Notes, fmt.Sprintf("no %s: models and memory come from the driver's files alone", name))
		return nil, nil
	}
	inv.SMI = path
	out, err := runSMI(ctx, cfg.Timeout, path, "--query-gpu=index,uuid,name,memory.total,pci.bus_id", "--format=csv,noheader,nounits")
	if err != nil {
		inv.Notes = append(inv.Notes, err.Error())
		return nil, nil
	}
	gpus := parseQuery(out)
	list, err := runSMI(ctx, cfg.Timeout, path, "-L")
	if err != nil {
		inv.Notes = append(inv.Notes, err.Error())
		return gpus, nil
	}
	return gpus, parseList(list)
}

// runSMI runs nvidia-smi with args (no shell), bounded by timeout.
func runSMI(ctx context.Context, timeout time.Duration, path string, args ...string) ([]byte, error) {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("gpu: %s %s: %v: %s", path, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// parseQuery reads the CSV lines of --query-gpu=index,uuid,name,memory.total,pci.bus_id.
func parseQuery(out []byte) []smiGPU {
	var gpus []smiGPU
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ",")
		if len(f) < 5 {
			continue
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		idx, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		mem, _ := strconv.ParseInt(f[3], 10, 64) // "[N/A]" stays 0
		gpus = append(gpus, smiGPU{index: idx, uuid: f[1], name: f[2], memoryMB: mem, bus: f[4]})
	}
	return gpus
}

var (
	listGPURe = regexp.MustCompile(`^GPU [0-9]+: .*\(UUID: (GPU-[^)]+)\)`)
	listMIGRe = regexp.MustCompile(`^\s+MIG (\S+)\s+Device\s+[0-9]+: \(UUID: (MIG-[^)]+)\)`)
)

// parseList reads the MIG instances of nvidia-smi -L, each under its GPU.
func parseList(out []byte) []smiMIG {
	var migs []smiMIG
	parent := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if m := listGPURe.FindStringSubmatch(line); m != nil {
			parent = m[1]
		} else if m := listMIGRe.FindStringSubmatch(line); m != nil && parent != "" {
			migs = append(migs, smiMIG{parentUUID: parent, profile: m[1], uuid: m[2]})
		}
	}
	return migs
}

// migMemoryRe reads the memory of a MIG profile ("1g.10gb", "3g.40gb").
var migMemoryRe = regexp.MustCompile(`\.([0-9]+)gb`)

// merge joins what the device tree, the driver's files and nvidia-smi say
// into devices: one per GPU node, or one per MIG instance of a GPU that
// has some. A GPU is matched across sources by UUID, else bus id, else
// its minor number as nvidia-smi's index.
func merge(root string, minors []int, proc map[int]procGPU, smi []smiGPU, mig []smiMIG) []Device {
	var out []Device
	for _, minor := range minors {
		g := envspec.GPU{Index: minor}
		if p, ok := proc[minor]; ok {
			g.Model, g.UUID, g.BusID = p.model, p.uuid, p.bus
		}
		if s, ok := findSMI(smi, g, minor); ok {
			g.Index, g.Model, g.MemoryMB = s.index, s.name, s.memoryMB
			g.UUID, g.BusID = cmpOr(g.UUID, s.uuid), cmpOr(g.BusID, s.bus)
		}
		nodes := []Node{{Host: filepath.Join(root, "dev", "nvidia"+strconv.Itoa(minor)), Sandbox: "/dev/nvidia" + strconv.Itoa(minor)}}
		instances := migsOf(mig, g.UUID)
		if len(instances) == 0 {
			out = append(out, Device{GPU: g, Nodes: nodes})
			continue
		}
		caps := filepath.Join(root, "dev", "nvidia-caps")
		if _, err := os.Stat(caps); err == nil {
			nodes = append(nodes, Node{Host: caps, Sandbox: "/dev/nvidia-caps"})
		}
		for _, m := range instances {
			d := Device{GPU: g, Nodes: nodes}
			d.UUID, d.MIG, d.parent = m.uuid, m.profile, g.UUID
			if mm := migMemoryRe.FindStringSubmatch(m.profile); mm != nil {
				gb, _ := strconv.ParseInt(mm[1], 10, 64)
				d.MemoryMB = gb * 1024
			}
			out = append(out, d)
		}
	}
	slices.SortStableFunc(out, func(a, b Device) int { return a.Index - b.Index })
	return out
}

func findSMI(smi []smiGPU, g envspec.GPU, minor int) (smiGPU, bool) {
	for _, s := range smi {
		if g.UUID != "" && s.uuid == g.UUID || g.UUID == "" && g.BusID != "" && sameBus(s.bus, g.BusID) {
			return s, true
		}
	}
	if g.UUID == "" && g.BusID == "" {
		for _, s := range smi {
			if s.index == minor {
				return s, true
			}
		}
	}
	return smiGPU{}, false
}

// sameBus compares PCI addresses whatever the width of their domain
// (nvidia-smi writes 00000000:18:00.0, the driver 0000:18:00.0).
func sameBus(a, b string) bool {
	norm := func(s string) string {
		dom, rest, ok := strings.Cut(strings.ToLower(s), ":")
		if !ok {
			return s
		}
		return strings.TrimLeft(dom, "0") + ":" + rest
	}
	return norm(a) == norm(b)
}

func migsOf(mig []smiMIG, parent string) []smiMIG {
	var out []smiMIG
	for _, m := range mig {
		if parent != "" && m.parentUUID == parent {
			out = append(out, m)
		}
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
