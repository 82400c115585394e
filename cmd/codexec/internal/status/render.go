package status

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Text writes snap as two tables, the pools then the workers.
func Text(w io.Writer, snap Snapshot) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "codexec status at %s: %s, %s", snap.At.Format("2006-01-02 15:04:05 MST"),
		plural(len(snap.Workers), "worker"), plural(len(snap.Pools), "pool"))
	if snap.PublishedPerSec != nil {
		fmt.Fprintf(&b, ", %.1f jobs published/s", *snap.PublishedPerSec)
	}
	b.WriteString("\n")
	if snap.NoStream {
		b.WriteString("no jobs stream yet: no frontend or worker has connected to this NATS\n")
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tWORKERS\tLOAD/SLOTS\tQUEUED\tIN FLIGHT\tJOBS/S")
	for _, p := range snap.Pools {
		fmt.Fprintf(tw, "%s\t%d\t%d/%d\t%d\t%d\t%s\n", p.Name, p.Workers, p.Load, p.Slots, p.Queued, p.InFlight, rate(p.JobsPerSec))
	}
	_ = tw.Flush()
	b.WriteString("\n")
	if len(snap.Workers) == 0 {
		b.WriteString("no live worker\n")
	} else {
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "WORKER\tPOOL\tHOST\tLOAD\tWARM\tENVS\tUP\tLABELS")
		for _, wk := range snap.Workers {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%d\t%s\t%s\n", wk.ID, wk.Pool, dash(wk.Host), wk.Load, wk.Concurrency,
				wk.Warm, len(wk.Envs), uptime(snap.At, wk.StartedAt), labels(wk.Labels))
		}
		_ = tw.Flush()
		b.WriteString(gpuLines(snap.Workers))
	}
	_, err := w.Write(b.Bytes())
	return err
}

// JSON writes snap as one line of JSON.
func JSON(w io.Writer, snap Snapshot) error {
	if snap.Workers == nil {
		snap.Workers = []Worker{}
	}
	if snap.Pools == nil {
		snap.Pools = []Pool{}
	}
	data, err := json.Marshal(snap)
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func rate(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *r)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func uptime(now, started time.Time) string {
	if started.IsZero() {
		return "-"
	}
	return now.Sub(started).Round(time.Second).String()
}

func labels(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

// ANSI control sequences of the terminal view.
const (
	ansiHome       = "\x1b[H"  // cursor to the top left
	ansiClear      = "\x1b[2J" // clear the screen
	ansiClearLine  = "\x1b[K"  // clear to the end of the line
	ansiClearBelow = "\x1b[J"  // clear from the cursor to the end of the screen
	ansiHideCursor = "\x1b[?25l"
	ansiShowCursor = "\x1b[?25h"
)

// Options says how Show and Watch render.
type Options struct {
	// JSON writes one line of JSON per snapshot instead of tables.
	JSON bool
	// Terminal redraws the tables in place (ANSI) instead of printing one
	// block after another; ignored with JSON.
	Terminal bool
	// Interval is the time between two reads.
	Interval time.Duration
}

// Show reads the cluster twice, Interval apart (the rates need two reads),
// and writes the second snapshot.
func Show(ctx context.Context, w io.Writer, read func(context.Context) (Snapshot, error), opt Options) error {
	prev, err := read(ctx)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(opt.Interval):
	}
	cur, err := read(ctx)
	if err != nil {
		return err
	}
	Rates(&prev, &cur)
	if opt.JSON {
		return JSON(w, cur)
	}
	return Text(w, cur)
}

// Watch reads the cluster every Interval and writes each snapshot until ctx
// ends: on a terminal it redraws one screen in place, otherwise it prints
// one block (or JSON line) per read. A read that fails is shown, with its
// error, and the next one tried; the error of the last read is returned
// when ctx ends (nil when it worked).
func Watch(ctx context.Context, w io.Writer, read func(context.Context) (Snapshot, error), opt Options) error {
	term := opt.Terminal && !opt.JSON
	if term {
		if _, err := io.WriteString(w, ansiHideCursor+ansiClear); err != nil {
			return err
		}
		defer func() { _, _ = io.WriteString(w, ansiShowCursor) }()
	}
	var prev *Snapshot
	var lastErr error
	t := time.NewTicker(opt.Interval)
	defer t.Stop()
	for {
		cur, err := read(ctx)
		lastErr = err
		if err == nil && prev != nil {
			Rates(prev, &cur)
		}
		if err == nil {
			prev = &cur
		}
		if werr := writeFrame(w, cur, err, opt, term); werr != nil {
			return werr
		}
		if ctx.Err() != nil {
			return lastErr
		}
		select {
		case <-ctx.Done():
			return lastErr
		case <-t.C:
		}
	}
}

// writeFrame writes one refresh of Watch.
func writeFrame(w io.Writer, snap Snapshot, readErr error, opt Options, term bool) error {
	var b bytes.Buffer
	switch {
	case opt.JSON && readErr != nil:
		data, _ := json.Marshal(map[string]any{"at": time.Now().UTC(), "error": readErr.Error()})
		b.Write(append(data, '\n'))
	case opt.JSON:
		if err := JSON(&b, snap); err != nil {
			return err
		}
	case readErr != nil:
		fmt.Fprintf(&b, "codexec status at %s: %v\n", time.Now().UTC().Format("2006-01-02 15:04:05 MST"), readErr)
	default:
		if err := Text(&b, snap); err != nil {
			return err
		}
	}
	if !term {
		if !opt.JSON {
			b.WriteString("\n")
		}
		_, err := w.Write(b.Bytes())
		return err
	}
	// Each line clears what the previous frame left to its right, and the
	// frame clears what was below it.
	frame := ansiHome + strings.ReplaceAll(strings.TrimSuffix(b.String(), "\n"), "\n", ansiClearLine+"\r\n") + ansiClearLine + "\r\n" + ansiClearBelow
	_, err := io.WriteString(w, frame)
	return err
}
