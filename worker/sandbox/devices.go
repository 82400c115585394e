package sandbox

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Device is a device node (or a directory of them, /dev/nvidia-caps)
// bound into one sandbox: Src on the host at Dst, a path directly under
// /dev.
type Device struct {
	Src, Dst string
}

// WithDevices returns a copy of s whose sandboxes also bind devs, on top
// of what every sandbox of s binds: the devices of one job (its GPUs),
// which the sandboxes of other jobs do not see. Each Dst must be a name
// directly under /dev and each Src an absolute path.
func (s *Sandbox) WithDevices(devs []Device) (*Sandbox, error) {
	for _, d := range devs {
		if !filepath.IsAbs(d.Src) || filepath.Dir(d.Dst) != "/dev" || filepath.Clean(d.Dst) != d.Dst || strings.ContainsAny(d.Dst, "\n") {
			return nil, fmt.Errorf("sandbox: device %q at %q: want an absolute source bound directly under /dev", d.Src, d.Dst)
		}
	}
	c := *s
	c.devices = slices.Concat(s.devices, devs)
	return &c, nil
}

// deviceArgs binds the sandbox's own devices.
func (s *Sandbox) deviceArgs() []string {
	var args []string
	for _, d := range s.devices {
		args = append(args, "--dev-bind", d.Src, d.Dst)
	}
	return args
}
