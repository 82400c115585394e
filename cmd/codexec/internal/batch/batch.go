// Package batch is `codexec batch`: it runs a batch of jobs (a directory
// of scripts, or one script with a parameter file) on a codexec cluster
// through its HTTP frontend, or on this machine with an embedded
// single-node codexec, and keeps the batch's state and results in a
// directory so that it can be followed, cancelled and resumed.
package batch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/flagenv"
)

// Options are what Main needs from the cli: the embedded codexec and the
// data directory it and the batches' index live under by default.
type Options struct {
	Embedded Embedded
	DataDir  string
}

// Main runs `codexec batch` with args (without the program and command
// names): run (the default), status, results or cancel.
func Main(ctx context.Context, args []string, opts Options, stdout, stderr io.Writer) error {
	sub := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	switch sub {
	case "run":
		return runCmd(ctx, args, opts, stdout, stderr)
	case "status":
		return statusCmd(args, opts, stdout, stderr)
	case "results":
		return resultsCmd(ctx, args, opts, stdout, stderr)
	case "cancel":
		return cancelCmd(ctx, args, opts, stdout, stderr)
	}
	return flagenv.UsageError{Err: fmt.Errorf("unknown batch command %q: run, status, results or cancel", sub)}
}

// connFlags are how a batch reaches codexec.
type connFlags struct {
	url, token, dataDir string
}

func (c *connFlags) register(f *flagenv.Flags, dataDir string) {
	f.String(&c.url, "url", "CODEXEC_URL", "", "the cluster's MCP endpoint, e.g. https://codexec.example/mcp (default: run on this machine, in this process)")
	f.String(&c.token, "token", "CODEXEC_TOKEN", "", "API token for --url (see codexec token)")
	f.String(&c.dataDir, "data-dir", "CODEXEC_BATCH_DATA_DIR", filepath.Join(dataDir, "batch"),
		"without --url: where this machine's codexec keeps queued jobs, results and environments; also where batch ids are indexed")
}

// dial connects to url, or starts the embedded codexec.
func (c *connFlags) dial(ctx context.Context, embedded Embedded, url string) (*conn, error) {
	if url != "" {
		return dialHTTP(ctx, url, c.token)
	}
	if embedded == nil {
		return nil, errors.New("no --url, and no embedded codexec in this build")
	}
	cl, stop, err := embedded(ctx, c.dataDir)
	if err != nil {
		return nil, err
	}
	return &conn{c: cl, stop: stop}, nil
}

func (c *connFlags) index() index { return index{root: c.dataDir} }

func runCmd(ctx context.Context, args []string, opts Options, stdout, stderr io.Writer) error {
	f := flagenv.New("codexec batch", stderr)
	var cf connFlags
	var in Input
	var out, packages, lim string
	var timeout, every time.Duration
	var retries, parallel int
	var spec Spec
	f.String(&in.Dir, "dir", "", "", "run each .py file of this directory as one job")
	f.String(&in.Script, "script", "", "", "run this script once per row of --params")
	f.String(&in.Params, "params", "", "", "JSON Lines (one object per line) or .csv (a header, then one job per row); the row reaches the script as JSON in $CODEXEC_PARAMS")
	f.String(&out, "out", "", "batch-results", "the batch's directory: results, per-job output and what resuming needs (running the same command again resumes)")
	f.String(&spec.Python, "python", "", "", "Python version of the batch's environment, e.g. 3.12 (default: the workers' default environment)")
	f.String(&packages, "packages", "", "", "comma-separated requirements of the batch's environment, e.g. numpy>=2,pandas")
	f.Duration(&timeout, "timeout", "", 0, "wall-clock limit of each job (default: the frontend's)")
	f.String(&lim, "limits", "", "", "each job's limits, as KEY=N,... with the keys of execute_code's limits (memory_mb, cpu_seconds, processes, file_size_mb, disk_mb, open_files)")
	f.Int(&retries, "retries", "", 2, "how often a job is tried again after the infrastructure failed it (never after its own error or timeout)")
	f.Int(&parallel, "parallel", "", 64, "most jobs submitted and unfinished at once")
	f.Duration(&every, "progress-every", "", 5*time.Second, "interval of the progress lines when stdout is not a terminal")
	cf.register(f, opts.DataDir)
	if err := f.Parse(args); err != nil {
		return err
	}
	if err := in.check(); err != nil {
		return flagenv.UsageError{Err: err}
	}
	if parallel < 1 || retries < 0 {
		return flagenv.UsageError{Err: errors.New("--parallel must be at least 1 and --retries at least 0")}
	}
	var err error
	if spec.Limits, err = parseLimits(lim); err != nil {
		return flagenv.UsageError{Err: err}
	}
	spec.Packages = commaList(packages)
	spec.Timeout, spec.Retries, spec.URL = timeout.Seconds(), retries, cf.url
	for _, p := range []*string{&in.Dir, &in.Script, &in.Params} {
		if *p != "" {
			if *p, err = filepath.Abs(*p); err != nil {
				return err
			}
		}
	}
	spec.Input = in
	if _, err := in.script(); err != nil {
		return flagenv.UsageError{Err: err}
	}
	if _, err := in.count(); err != nil {
		return flagenv.UsageError{Err: err}
	}
	spec.ID, spec.Created = newID(), time.Now().UTC()
	st, err := create(out, spec)
	if err != nil {
		return err
	}
	if st.spec.Input != in {
		return flagenv.UsageError{Err: fmt.Errorf("%s holds batch %s of other input; choose another --out", out, st.spec.ID)}
	}
	return runBatch(ctx, st, cf, opts, every, parallel, stdout, stderr)
}

// runBatch runs the batch of st to its end.
func runBatch(ctx context.Context, st *state, cf connFlags, opts Options, every time.Duration, parallel int, stdout, stderr io.Writer) (err error) {
	if err := cf.index().add(st.spec.ID, st.dir); err != nil {
		return err
	}
	total, err := st.spec.Input.count()
	if err != nil {
		return err
	}
	script, err := st.spec.Input.script()
	if err != nil {
		return err
	}
	rows, err := st.spec.Input.open()
	if err != nil {
		return err
	}
	defer rows.Close()
	if err := st.openForAppend(); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	where := "on this machine"
	if st.spec.URL != "" {
		where = "through " + st.spec.URL
	}
	fmt.Fprintf(stdout, "batch %s: %d jobs (%d finished before), %s; results in %s\n", st.spec.ID, total, len(st.done), where, st.dir)
	c, err := cf.dial(ctx, opts.Embedded, st.spec.URL)
	if err != nil {
		return err
	}
	defer c.stop()
	r := &runner{st: st, conn: c, script: script, in: rows, window: parallel, log: stderr,
		prog: newProgress(stdout, st.spec.ID, total, every), counts: counts{total: total, start: time.Now()}}
	err = r.run(ctx)
	r.show()
	r.prog.done(r.counts)
	if err != nil {
		return fmt.Errorf("batch %s stopped: %w; run the same command again to resume it", st.spec.ID, err)
	}
	if r.st.failed > 0 {
		return fmt.Errorf("batch %s: %d of %d jobs failed (see %s)", st.spec.ID, r.st.failed, total, filepath.Join(st.dir, resultsFile))
	}
	return nil
}

func statusCmd(args []string, opts Options, stdout, stderr io.Writer) error {
	id, args := firstArg(args)
	f := flagenv.New("codexec batch status", stderr)
	var cf connFlags
	cf.register(f, opts.DataDir)
	if err := f.Parse(args); err != nil {
		return err
	}
	if id == "" {
		return flagenv.UsageError{Err: errors.New("usage: codexec batch status ID|DIR")}
	}
	dir, err := cf.index().resolve(id)
	if err != nil {
		return err
	}
	st, err := open(dir)
	if err != nil {
		return err
	}
	total, err := st.spec.Input.count()
	if err != nil {
		return err
	}
	c := counts{total: total, failed: st.failed, ok: int64(len(st.done)) - st.failed, start: time.Now()}
	for row := range st.sent {
		if !st.done[row] {
			c.running++
		}
	}
	state := "unfinished"
	switch {
	case st.cancelled():
		state = "cancelled"
	case c.finished() == total:
		state = "finished"
	}
	fmt.Fprintf(stdout, "batch %s (%s): %d/%d finished: ok %d, failed %d, submitted and unfinished %d, not submitted %d\nresults: %s\n",
		st.spec.ID, state, c.finished(), total, c.ok, c.failed, c.running, c.queued(), filepath.Join(dir, resultsFile))
	return nil
}

func resultsCmd(ctx context.Context, args []string, opts Options, stdout, stderr io.Writer) error {
	id, args := firstArg(args)
	f := flagenv.New("codexec batch results", stderr)
	var cf connFlags
	cf.register(f, opts.DataDir)
	if err := f.Parse(args); err != nil {
		return err
	}
	if id == "" {
		return flagenv.UsageError{Err: errors.New("usage: codexec batch results ID|DIR")}
	}
	dir, err := cf.index().resolve(id)
	if err != nil {
		return err
	}
	st, err := open(dir)
	if err != nil {
		return err
	}
	// Collect what finished since the client last looked: one poll of
	// every job submitted and unfinished, nothing submitted.
	if len(st.sent) > len(st.done) {
		if err := collect(ctx, st, cf, opts, stderr); err != nil {
			return err
		}
	}
	return eachLine(filepath.Join(dir, resultsFile), func(l Line) {
		fmt.Fprintf(stdout, "%s\t%s\t%d\t%s\n", l.Name, l.Status, l.ExitCode, filepath.Join(dir, "jobs", l.Name))
	})
}

// collect polls st's unfinished jobs once and records those finished.
func collect(ctx context.Context, st *state, cf connFlags, opts Options, stderr io.Writer) (err error) {
	rows, err := st.spec.Input.open()
	if err != nil {
		return err
	}
	defer rows.Close()
	if err := st.openForAppend(); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	c, err := cf.dial(ctx, opts.Embedded, st.spec.URL)
	if err != nil {
		return err
	}
	defer c.stop()
	r := &runner{st: st, conn: c, in: rows, log: stderr, flights: map[string]*flight{}, tries: map[int64]int{}, cancel: true}
	for !r.eof {
		if _, _, err := r.nextRow(); err != nil {
			return err
		}
	}
	_, err = r.poll(ctx)
	return err
}

func cancelCmd(ctx context.Context, args []string, opts Options, stdout, stderr io.Writer) error {
	id, args := firstArg(args)
	f := flagenv.New("codexec batch cancel", stderr)
	var cf connFlags
	cf.register(f, opts.DataDir)
	if err := f.Parse(args); err != nil {
		return err
	}
	if id == "" {
		return flagenv.UsageError{Err: errors.New("usage: codexec batch cancel ID|DIR")}
	}
	dir, err := cf.index().resolve(id)
	if err != nil {
		return err
	}
	st, err := open(dir)
	if err != nil {
		return err
	}
	if err := markCancelled(dir); err != nil {
		return err
	}
	if st.spec.URL == "" {
		// The embedded codexec runs inside the batch's client, if it runs:
		// the client sees the mark and cancels.
		fmt.Fprintf(stdout, "batch %s marked cancelled: its client stops submitting and cancels what is queued\n", st.spec.ID)
		return nil
	}
	c, err := cf.dial(ctx, opts.Embedded, st.spec.URL)
	if err != nil {
		return err
	}
	defer c.stop()
	var ids []string
	for row, sub := range st.sent {
		if !st.done[row] {
			ids = append(ids, sub.JobID)
		}
	}
	if err := c.cancel(ctx, st.spec.ID, ids); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "batch %s cancelled: jobs no worker has started will not start, running ones are stopped\n", st.spec.ID)
	return nil
}

// firstArg splits a leading argument that is not a flag off args.
func firstArg(args []string) (string, []string) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args[0], args[1:]
	}
	return "", args
}

// parseLimits reads KEY=N,...
func parseLimits(s string) (map[string]int64, error) {
	items := commaList(s)
	if len(items) == 0 {
		return nil, nil
	}
	out := make(map[string]int64, len(items))
	for _, item := range items {
		k, v, ok := strings.Cut(item, "=")
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if !ok || err != nil || n < 1 {
			return nil, fmt.Errorf("--limits: %q is not KEY=N with N at least 1", item)
		}
		out[strings.TrimSpace(k)] = n
	}
	return out, nil
}

// commaList splits a comma-separated value, dropping empty items.
func commaList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
