//go:build linux

package runner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// startInterp starts a context's interpreter in a zygote of the test's own,
// closed at cleanup.
func startInterp(t *testing.T) *Interp {
	t.Helper()
	b := setup(t)
	z := startZygote(t, ZygoteConfig{Env: ChildEnv(nil, "", "", nil, nil), Preload: testPreload})
	s := b.spec(t, string(ContextSource))
	it, err := z.StartInterp(context.Background(), s)
	if err != nil {
		t.Fatalf("StartInterp: %v", err)
	}
	t.Cleanup(it.Close)
	return it
}

func cell(t *testing.T, it *Interp, code string, timeout time.Duration) CellOutcome {
	t.Helper()
	out, err := it.Exec(context.Background(), CellSpec{Code: code, Timeout: timeout, Grace: time.Second})
	if err != nil {
		t.Fatalf("Exec(%q): %v (stdout %q, stderr %q)", code, err, out.Stdout, out.Stderr)
	}
	return out
}

// Variables, imports and functions live from one cell to the next; the last
// bare expression's value is shown as the interactive interpreter shows it;
// print and an exception's traceback as in a script, and a cell that raised
// leaves the context usable.
func TestInterpKeepsStateBetweenCells(t *testing.T) {
	t.Parallel()
	it := startInterp(t)
	cell(t, it, "x = 1\nimport math\ndef f(v):\n    return v * 2\n", 0)
	if out := cell(t, it, "x += 1; x", 0); string(out.Stdout) != "2\n" || out.ExitCode != 0 {
		t.Errorf("x += 1; x: stdout %q, exit %d, want 2", out.Stdout, out.ExitCode)
	}
	if out := cell(t, it, "print('p', f(x))\nmath.floor(2.5)", 0); string(out.Stdout) != "p 4\n2\n" {
		t.Errorf("stdout %q, want p 4 then 2", out.Stdout)
	}
	if out := cell(t, it, "None", 0); string(out.Stdout) != "" {
		t.Errorf("None shows %q, want nothing", out.Stdout)
	}
	out := cell(t, it, "y = 5\n1/0\n", 0)
	if out.ExitCode != 1 || out.Error != "ZeroDivisionError: division by zero" ||
		!strings.Contains(string(out.Stderr), "ZeroDivisionError") || !strings.Contains(string(out.Stderr), "1/0") ||
		strings.Contains(string(out.Stderr), "context.py") {
		t.Errorf("raise: exit %d, error %q, stderr %q", out.ExitCode, out.Error, out.Stderr)
	}
	if out := cell(t, it, "import __main__, sys; print(x, y, __name__, sys.stdin.read() == '')", 0); string(out.Stdout) != "2 5 __main__ True\n" {
		t.Errorf("after the raise: stdout %q", out.Stdout)
	}
	if out := cell(t, it, "print(sorted(n for n in dir() if n.startswith('_')))", 0); strings.Contains(string(out.Stdout), "_Context") {
		t.Errorf("the context's own names leak into the cells' namespace: %s", out.Stdout)
	}
	if out := cell(t, it, "exit(3)", 0); out.ExitCode != 1 || !strings.Contains(out.Error, "SystemExit") {
		t.Errorf("exit(3): exit %d, error %q", out.ExitCode, out.Error)
	}
	if out := cell(t, it, "x", 0); string(out.Stdout) != "2\n" {
		t.Errorf("after exit(): stdout %q", out.Stdout)
	}
}

// A timeout interrupts the cell with KeyboardInterrupt and the context goes
// on; a cell that ignores the interrupt is killed after the grace, and the
// context is then gone.
func TestInterpTimeout(t *testing.T) {
	t.Parallel()
	it := startInterp(t)
	cell(t, it, "n = 41", 0)
	out := cell(t, it, "import time\nprint('before', flush=True)\ntime.sleep(60)", 200*time.Millisecond)
	if !out.TimedOut || !out.Interrupted || out.Error != "KeyboardInterrupt" || string(out.Stdout) != "before\n" ||
		!strings.Contains(string(out.Stderr), "KeyboardInterrupt") {
		t.Fatalf("sleep past the timeout: %+v", out)
	}
	// The traceback is the cell's: it ends in the cell's line, not in the
	// context's own handler that raised the interrupt.
	if tb := string(out.Stderr); !strings.Contains(tb, "time.sleep(60)") || strings.Contains(tb, "on_input") ||
		strings.Contains(tb, "raise_signal") {
		t.Errorf("the interrupted cell's traceback shows the context's own frames:\n%s", tb)
	}
	if out := cell(t, it, "n + 1", 0); string(out.Stdout) != "42\n" {
		t.Fatalf("after the timeout: stdout %q", out.Stdout)
	}
	code := "import time\nwhile True:\n    try:\n        time.sleep(60)\n    except KeyboardInterrupt:\n        pass\n"
	res, err := it.Exec(context.Background(), CellSpec{Code: code, Timeout: 100 * time.Millisecond, Grace: 300 * time.Millisecond})
	if !errors.Is(err, ErrInterpEnded) || !res.TimedOut || res.Signal != "killed" || !strings.Contains(err.Error(), "after its KeyboardInterrupt") {
		t.Fatalf("ignored interrupt: %v, %+v", err, res)
	}
	if _, err := it.Exec(context.Background(), CellSpec{Code: "n"}); !errors.Is(err, ErrInterpEnded) {
		t.Fatalf("after the kill: %v, want ErrInterpEnded", err)
	}
}

// A cell that ends the interpreter's process ends the context, and says so.
func TestInterpProcessExit(t *testing.T) {
	t.Parallel()
	it := startInterp(t)
	_, err := it.Exec(context.Background(), CellSpec{Code: "import os; print('bye', flush=True); os._exit(7)"})
	if !errors.Is(err, ErrInterpEnded) || !strings.Contains(err.Error(), "status 7") {
		t.Fatalf("os._exit(7): %v", err)
	}
}

// Source larger than one datagram arrives whole.
func TestInterpLargeCell(t *testing.T) {
	t.Parallel()
	it := startInterp(t)
	big := "s = '" + strings.Repeat("a", 300<<10) + "'\nlen(s)"
	if out := cell(t, it, big, 0); string(out.Stdout) != "307200\n" {
		t.Fatalf("stdout %q", out.Stdout)
	}
}

func BenchmarkInterpCell(b *testing.B) {
	bb := setup(b)
	z := startZygote(b, ZygoteConfig{Env: ChildEnv(nil, "", "", nil, nil), Preload: testPreload})
	it, err := z.StartInterp(context.Background(), bb.spec(b, string(ContextSource)))
	if err != nil {
		b.Fatal(err)
	}
	defer it.Close()
	if _, err := it.Exec(context.Background(), CellSpec{Code: "x = 0"}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := it.Exec(context.Background(), CellSpec{Code: "x += 1; x"}); err != nil {
			b.Fatal(err)
		}
	}
}

// A context waits for its calls most of its life: meanwhile its zygote
// prepares a spare for the next job, as an idle zygote does. (It once
// counted a context as a running job, and prepared none while one lived.)
func TestInterpLeavesZygoteIdle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	z := startZygote(t, ZygoteConfig{Env: ChildEnv(nil, "", "", nil, nil), Preload: testPreload})
	it, err := z.StartInterp(context.Background(), b.spec(t, string(ContextSource)))
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	if _, err := it.Exec(context.Background(), CellSpec{Code: "x = 1"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(children(t, z.Info().PID)) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the zygote has %d child(ren) while a context waits: no spare was prepared", len(children(t, z.Info().PID)))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An exception with a long message ends its cell like any other: the
// "done" that names it stays readable.
func TestInterpLongError(t *testing.T) {
	t.Parallel()
	it := startInterp(t)
	out := cell(t, it, "raise ValueError('x' * 100000)", 0)
	if out.ExitCode != 1 || !strings.HasPrefix(out.Error, "ValueError: xxx") || len(out.Error) > 1000 {
		t.Fatalf("exit %d, error of %d bytes", out.ExitCode, len(out.Error))
	}
}
