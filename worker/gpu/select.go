package gpu

import (
	"fmt"
	"strconv"
	"strings"
)

// Select keeps the devices an operator offers (--gpus): "all" (or ""),
// "none", or a comma-separated list of indices ("0,2") and UUIDs (of GPUs
// or MIG instances). An index or a GPU's UUID selects every MIG instance
// of that GPU. An item that names no device is an error, so that a typo
// does not silently offer nothing.
func Select(devs []Device, spec string) ([]Device, error) {
	spec = strings.TrimSpace(spec)
	switch strings.ToLower(spec) {
	case "", "all":
		return devs, nil
	case "none":
		return nil, nil
	}
	keep := make([]bool, len(devs))
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		found := false
		for i, d := range devs {
			if matches(d, item) {
				keep[i], found = true, true
			}
		}
		if !found {
			return nil, fmt.Errorf("gpu: --gpus names %q, which is none of this worker's devices (%s)", item, names(devs))
		}
	}
	var out []Device
	for i, d := range devs {
		if keep[i] {
			out = append(out, d)
		}
	}
	return out, nil
}

// matches reports whether item (an index or a UUID) names d.
func matches(d Device, item string) bool {
	if n, err := strconv.Atoi(item); err == nil {
		return d.Index == n
	}
	if strings.EqualFold(d.UUID, item) {
		return true
	}
	// A GPU's UUID names its MIG instances too (their nodes are its own).
	return d.parent != "" && strings.EqualFold(d.parent, item)
}

func names(devs []Device) string {
	if len(devs) == 0 {
		return "none found"
	}
	var out []string
	for _, d := range devs {
		out = append(out, fmt.Sprintf("%d=%s", d.Index, d.Name()))
	}
	return strings.Join(out, ", ")
}
