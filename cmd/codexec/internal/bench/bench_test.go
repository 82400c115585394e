package bench

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/codexec/codexec/cmd/codexec/internal/flagenv"
)

func TestShellQuote(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"plain", "with space", "it's", `$(rm -rf /) "x" \ ;`} {
		out, err := exec.Command("bash", "-c", "printf %s "+shellQuote(s)).Output()
		if err != nil {
			t.Skipf("bash: %v", err)
		}
		if string(out) != s {
			t.Errorf("shellQuote(%q) came back as %q", s, out)
		}
	}
}

func TestProcessesCPU(t *testing.T) {
	t.Parallel()
	if got := processesCPU([]int{os.Getpid(), 0, -1}); got < 0 {
		t.Errorf("processesCPU = %v", got)
	}
}

// Main's command line: -h is help (not an error), and a bad command line is
// a flagenv.UsageError naming what is wrong, before anything is measured.
func TestBenchMainFlags(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	if err := Main(context.Background(), []string{"-h"}, &bytes.Buffer{}, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	for _, name := range []string{"-n", "-n-slow", "-concurrency", "-duration", "-cold", "-python", "-venv", "-cluster", "-modes", "-sandbox", "-baselines", "-keep", "-fairness", "-burst"} {
		if !strings.Contains(stderr.String(), "  "+name+" ") && !strings.Contains(stderr.String(), "  "+name+"\n") {
			t.Errorf("-h does not list %s:\n%s", name, stderr.String())
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "0"}, "must be positive"},
		{[]string{"-burst", "0"}, "must be positive"},
		{[]string{"-cluster", "maybe"}, `-cluster "maybe"`},
		{[]string{"-modes", "zygote,fork"}, `unknown exec mode "fork"`},
		{[]string{"-sandbox", "half"}, `"half"`},
		{[]string{"-no-such-flag"}, "no-such-flag"},
		{[]string{"extra"}, "unexpected arguments: extra"},
	} {
		err := Main(context.Background(), tc.args, &bytes.Buffer{}, &bytes.Buffer{})
		var ue flagenv.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v (%T), want a flagenv.UsageError with %q", tc.args, err, err, tc.want)
		}
	}
}
