package frontend

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
)

// The limits parameter of the tools that run code: per-call resource
// limits, each replacing the pool's default. The frontend checks their
// shape only; it does not know the pool's maximums, and the worker refuses
// a value above them.

// maxLimitValue bounds every value of the limits parameter, whatever its
// unit: far above any real maximum (1 TiB counted in MiB is 1<<20), and low
// enough that no conversion to bytes or nanoseconds overflows.
const maxLimitValue = 1 << 40

// limitParam is one key of the limits parameter and its wire.Limits field.
type limitParam struct {
	key, help string
	field     func(*wire.Limits) *int64
}

// limitParams are the keys of the limits parameter, in the order of their
// schema and of error messages.
var limitParams = []limitParam{
	{"memory_mb", "Memory of all the job's processes together, in MiB", func(l *wire.Limits) *int64 { return &l.MemoryMB }},
	{"cpu_seconds", "CPU time of each process, in seconds (wall-clock time is timeout_seconds)", func(l *wire.Limits) *int64 { return &l.CPUSeconds }},
	{"processes", "Processes and threads the job may have at once", func(l *wire.Limits) *int64 { return &l.Processes }},
	{"file_size_mb", "Largest file the job may write, in MiB", func(l *wire.Limits) *int64 { return &l.FileSizeMB }},
	{"disk_mb", "Disk the job may use in the session's working directory, in MiB", func(l *wire.Limits) *int64 { return &l.DiskMB }},
	{"open_files", "Open files (descriptors) of each process", func(l *wire.Limits) *int64 { return &l.OpenFiles }},
}

func limitKeys() string {
	keys := make([]string, len(limitParams))
	for i, p := range limitParams {
		keys[i] = p.key
	}
	return strings.Join(keys, ", ")
}

// limitsOption declares the limits parameter.
func limitsOption() mcp.ToolOption {
	props := make(map[string]any, len(limitParams))
	for _, p := range limitParams {
		props[p.key] = map[string]any{"type": "integer", "minimum": 1, "description": p.help}
	}
	return mcp.WithObject("limits",
		mcp.Description("Resource limits for this call, each replacing the pool's default for it (omit a key to keep the default). "+
			"A value above the pool's maximum is refused. Keys: "+limitKeys()),
		mcp.Properties(props),
		mcp.AdditionalProperties(false),
	)
}

// limitsArg reads the optional limits argument from untrusted input: an
// object whose keys are limitParams' and whose values are whole numbers
// from 1 to maxLimitValue. Absent, null or {} is nil (the pool's
// defaults); a null value is the same as an absent key.
func limitsArg(args map[string]any) (*wire.Limits, error) {
	v, present := args["limits"]
	if !present || v == nil {
		return nil, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, rejected(`argument 'limits' must be an object, e.g. {"memory_mb": 2048, "cpu_seconds": 60}`)
	}
	var out wire.Limits
	for _, key := range slices.Sorted(maps.Keys(obj)) {
		i := slices.IndexFunc(limitParams, func(p limitParam) bool { return p.key == key })
		if i < 0 {
			return nil, rejected("unknown key %q in 'limits' (valid keys: %s)", key, limitKeys())
		}
		if obj[key] == nil {
			continue
		}
		n, ok := limitValue(obj[key])
		if !ok {
			return nil, rejected("limits.%s must be a whole number from 1 to %d, not %s", key, int64(maxLimitValue), describeValue(obj[key]))
		}
		*limitParams[i].field(&out) = n
	}
	if out == (wire.Limits{}) {
		return nil, nil
	}
	return &out, nil
}

// limitValue reads one value as a whole number in [1, maxLimitValue].
func limitValue(v any) (int64, bool) {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	case json.Number:
		n, err := x.Int64()
		if err != nil {
			return 0, false
		}
		f = float64(n)
	default:
		return 0, false
	}
	if math.IsNaN(f) || f != math.Trunc(f) || f < 1 || f > maxLimitValue {
		return 0, false
	}
	return int64(f), true
}

// describeValue shows a refused value briefly: its JSON, cut short.
func describeValue(v any) string {
	switch x := v.(type) {
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		if len(x) > 20 {
			x = x[:20] + "..."
		}
		return fmt.Sprintf("the string %q", x)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("a %T", v)
	}
	if len(raw) > 40 {
		raw = append(raw[:40], "..."...)
	}
	return string(raw)
}
