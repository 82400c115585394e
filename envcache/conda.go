package envcache

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"github.com/codexec/codexec/envspec"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Conda is the Manager for conda environments, built by prefix with conda,
// mamba or micromamba: `<bin> create --yes --json --prefix DIR python=3.12
// pkgs...`. Packages come from conda channels (conda package names, conda
// match specs: see envspec.Requirement.CondaString), in the same solve as Python.
// Jobs run with DIR/bin/python and the variables of Activation, not with
// `conda run`; activation scripts (etc/conda/activate.d) are not run.
//
// conda prints JSON with --json, errors included ({"exception_name": ...,
// "message": ...}); a failure is a *BuildError whose Err is a *CondaError.
// micromamba has no default channels: with none configured here it gets
// conda-forge.
type Conda struct {
	// Bin is the executable: a path, or a name looked up on PATH. ""
	// means the first of Prefer found on PATH.
	Bin string
	// Prefer lists the executables to look for, most preferred first;
	// nil means conda, mamba, micromamba.
	Prefer []string
	// Channels are passed as -c, in order; nil leaves conda's own
	// configuration (micromamba: conda-forge).
	Channels []string
	// OverrideChannels ignores the channels of conda's configuration
	// (--override-channels); use it with Channels.
	OverrideChannels bool
	// RootPrefix is micromamba's root prefix (--root-prefix), where its
	// named environments live; "" leaves micromamba's default
	// (MAMBA_ROOT_PREFIX). conda and mamba ignore it.
	RootPrefix string

	// lookPath finds executables; nil means exec.LookPath. Tests set it.
	lookPath func(string) (string, error)
}

var _ Manager = (*Conda)(nil)

// CondaError is a failure conda reported in its JSON output.
type CondaError struct {
	// Exception is conda's exception name ("PackagesNotFoundError"); ""
	// when it gave none (micromamba).
	Exception string
	// Message is conda's explanation.
	Message string
}

// Error returns the exception name and message.
func (e *CondaError) Error() string {
	if e.Exception == "" {
		return "conda: " + e.Message
	}
	return "conda: " + e.Exception + ": " + e.Message
}

// Name returns "conda".
func (*Conda) Name() string { return envspec.ManagerConda }

// Python returns dir/bin/python.
func (*Conda) Python(dir string) string { return filepath.Join(dir, "bin", "python") }

// Activation sets CONDA_PREFIX, CONDA_DEFAULT_ENV (the environment's name
// when it lives in an envs directory, else its prefix) and CONDA_SHLVL, and
// puts dir/bin first on PATH.
func (*Conda) Activation(dir string) Activation {
	name := dir
	if filepath.Base(filepath.Dir(dir)) == "envs" {
		name = filepath.Base(dir)
	}
	return Activation{
		Vars:       map[string]string{"CONDA_PREFIX": dir, "CONDA_DEFAULT_ENV": name, "CONDA_SHLVL": "1"},
		PathPrefix: []string{filepath.Join(dir, "bin")},
	}
}

// binary returns the executable to run and whether it is micromamba.
func (c *Conda) binary() (string, bool, error) {
	look := c.lookPath
	if look == nil {
		look = exec.LookPath
	}
	if c.Bin != "" {
		if strings.ContainsRune(c.Bin, '/') {
			return c.Bin, isMicromamba(c.Bin), nil
		}
		p, err := look(c.Bin)
		if err != nil {
			return "", false, fmt.Errorf("conda: %s not found on PATH", c.Bin)
		}
		return p, isMicromamba(p), nil
	}
	prefer := c.Prefer
	if prefer == nil {
		prefer = []string{"conda", "mamba", "micromamba"}
	}
	for _, name := range prefer {
		if p, err := look(name); err == nil {
			return p, isMicromamba(p), nil
		}
	}
	return "", false, fmt.Errorf("conda: none of %s found on PATH", strings.Join(prefer, ", "))
}

func isMicromamba(path string) bool { return strings.HasPrefix(filepath.Base(path), "micromamba") }

// Available finds the executable and runs it with --version.
func (c *Conda) Available(ctx context.Context) error {
	bin, _, err := c.binary()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, availableTimeout)
	defer cancel()
	if _, err := runQuiet(ctx, []string{bin, "--version"}, c.env()); err != nil {
		return fmt.Errorf("conda: %w", err)
	}
	return nil
}

func (c *Conda) env() []string {
	return withEnv(installerEnv(os.Environ()), nil, "VIRTUAL_ENV")
}

// createArgs returns the argv of a create: the options for the prefix,
// channels and index, then the specs.
func (c *Conda) createArgs(dir string, idx IndexConfig, specs []string) ([]string, error) {
	args, micro, err := c.argv("create", "--yes", "--json", "--prefix", dir)
	if err != nil {
		return nil, err
	}
	if c.OverrideChannels {
		args = append(args, "--override-channels")
	}
	channels := c.Channels
	if channels == nil && micro {
		channels = []string{"conda-forge"}
	}
	for _, ch := range channels {
		args = append(args, "--channel", ch)
	}
	if idx.NoIndex {
		args = append(args, "--offline")
	}
	return append(args, specs...), nil
}

// condaSpecs converts requirements to conda match specs.
func condaSpecs(reqs []envspec.Requirement) ([]string, error) {
	out := make([]string, 0, len(reqs))
	for _, r := range reqs {
		s, err := r.CondaString()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Create runs <bin> create --yes --json --prefix dir python=<version>
// specs..., Python and packages in one solve.
//
// With req.Confine, the command runs confined (see confinedPaths): conda
// then creates the environment in the empty directory made for it, and
// keeps its packages in the package cache it is configured with.
func (c *Conda) Create(ctx context.Context, dir string, req CreateRequest, progress io.Writer) error {
	if err := checkNewDir(dir); err != nil {
		return err
	}
	specs, err := condaSpecs(req.Packages)
	if err != nil {
		return err
	}
	py := "python"
	if req.Python != "" {
		py = "python=" + req.Python
	}
	args, err := c.createArgs(dir, req.Index, append([]string{py}, specs...))
	if err != nil {
		return err
	}
	cf, err := newConfinement(req.Confine, dir)
	if err != nil {
		return err
	}
	defer cf.close()
	if _, err := c.run(ctx, dir, cf, args, progress); err != nil {
		return err
	}
	if fi, err := os.Stat(c.Python(dir)); err != nil || !fi.Mode().IsRegular() {
		return &BuildError{Dir: dir, Args: args, Err: fmt.Errorf("conda reported success but %s is missing", c.Python(dir))}
	}
	return nil
}

// condaListEntry is one element of `conda list --json`.
type condaListEntry struct {
	Name     string `json:"name"`
	Version  string `json:"version"`
	Channel  string `json:"channel"`
	Platform string `json:"platform"`
}

// List runs <bin> list --json --prefix dir and adds the import names read
// from the prefix's site-packages (see Installed), matched by normalised
// name. It lists every conda package, Python or not (openssl, libgcc).
func (c *Conda) List(ctx context.Context, dir string) ([]envspec.Dist, error) {
	out, err := c.query(ctx, "list", "--json", "--prefix", dir)
	if err != nil {
		return nil, err
	}
	return parseCondaList(out, dir)
}

// parseCondaList decodes `conda list --json` and adds import names from the
// site-packages of dir, when it has one.
func parseCondaList(out []byte, dir string) ([]envspec.Dist, error) {
	var entries []condaListEntry
	if err := json.Unmarshal(lastJSON(out), &entries); err != nil {
		return nil, fmt.Errorf("conda: list: cannot decode its output: %w", err)
	}
	imports := map[string][]string{}
	if dists, err := Installed(dir); err == nil {
		for _, d := range dists {
			imports[envspec.NormalizeName(d.Name)] = d.Imports
		}
	}
	dists := make([]envspec.Dist, 0, len(entries))
	for _, e := range entries {
		if e.Name == "" {
			continue
		}
		dists = append(dists, envspec.Dist{Name: e.Name, Version: e.Version, Channel: e.Channel,
			Imports: imports[envspec.NormalizeName(e.Name)]})
	}
	slices.SortStableFunc(dists, func(a, b envspec.Dist) int { return cmp.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name)) })
	return dists, nil
}

// EnvList runs <bin> env list --json and returns the prefixes of the
// environments conda knows.
func (c *Conda) EnvList(ctx context.Context) ([]string, error) {
	out, err := c.query(ctx, "env", "list", "--json")
	if err != nil {
		return nil, err
	}
	return parseCondaEnvList(out)
}

// argv returns the argv of the subcommand sub: the executable, sub, and
// for micromamba the root prefix when one is set; micro says whether the
// executable is micromamba.
func (c *Conda) argv(sub ...string) (args []string, micro bool, err error) {
	bin, micro, err := c.binary()
	if err != nil {
		return nil, false, err
	}
	args = append([]string{bin}, sub...)
	if micro && c.RootPrefix != "" {
		args = append(args, "--root-prefix", c.RootPrefix)
	}
	return args, micro, nil
}

// query runs the subcommand sub quietly and returns its output, or the
// failure that output reports when it reports one.
func (c *Conda) query(ctx context.Context, sub ...string) ([]byte, error) {
	args, _, err := c.argv(sub...)
	if err != nil {
		return nil, err
	}
	out, err := runQuiet(ctx, args, c.env())
	if err != nil {
		if ce := parseCondaFailure(out); ce != nil {
			return nil, fmt.Errorf("%w (%v)", ce, err)
		}
		return nil, err
	}
	return out, nil
}

func parseCondaEnvList(out []byte) ([]string, error) {
	var v struct {
		Envs []string `json:"envs"`
	}
	if err := json.Unmarshal(lastJSON(out), &v); err != nil {
		return nil, fmt.Errorf("conda: env list: cannot decode its output: %w", err)
	}
	return v.Envs, nil
}

// ResolveEnv returns the prefix of an existing conda environment: an
// absolute prefix is checked (it must hold conda-meta and bin/python); a
// name is looked up in EnvList ("base" is the root prefix).
func (c *Conda) ResolveEnv(ctx context.Context, nameOrPrefix string) (string, error) {
	if filepath.IsAbs(nameOrPrefix) {
		if err := c.checkPrefix(nameOrPrefix); err != nil {
			return "", err
		}
		return nameOrPrefix, nil
	}
	envs, err := c.EnvList(ctx)
	if err != nil {
		return "", err
	}
	prefix, err := findCondaEnv(envs, nameOrPrefix)
	if err != nil {
		return "", err
	}
	if err := c.checkPrefix(prefix); err != nil {
		return "", err
	}
	return prefix, nil
}

// findCondaEnv picks the environment called name from env list's prefixes.
func findCondaEnv(envs []string, name string) (string, error) {
	var names []string
	for _, e := range envs {
		n := "base"
		if filepath.Base(filepath.Dir(e)) == "envs" {
			n = filepath.Base(e)
		}
		if n == name {
			return e, nil
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		return "", fmt.Errorf("conda: no environment %q: conda knows no environments", name)
	}
	return "", fmt.Errorf("conda: no environment %q (there are: %s)", name, strings.Join(names, ", "))
}

func (c *Conda) checkPrefix(prefix string) error {
	if !dirExists(filepath.Join(prefix, "conda-meta")) {
		return fmt.Errorf("conda: %s is not a conda environment (no conda-meta)", prefix)
	}
	if fi, err := os.Stat(c.Python(prefix)); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("conda: environment %s has no bin/python", prefix)
	}
	return nil
}

// maxCondaStdout bounds the stdout kept from a conda solve: the final JSON
// object, which lists every package linked, must fit.
const maxCondaStdout = 8 << 20

// confinedPaths returns what a confined create reads besides the system
// (the executable and the installation it belongs to, where a conda
// script's interpreter lives) and writes besides the environment (the
// package caches: CONDA_PKGS_DIRS, else pkgs in the root prefix, that is
// RootPrefix or MAMBA_ROOT_PREFIX for micromamba and the installation for
// conda and mamba; with none that exists, the build's own HOME serves).
func (c *Conda) confinedPaths(bin string, micro bool) (readOnly, writable []string) {
	readOnly = executablePaths(bin)
	var root string
	if real, err := filepath.EvalSymlinks(bin); err == nil {
		root = filepath.Dir(filepath.Dir(real))
		readOnly = append(readOnly, root)
	}
	if micro {
		root = cmp.Or(c.RootPrefix, os.Getenv("MAMBA_ROOT_PREFIX"))
		readOnly = append(readOnly, root)
	}
	if dirs := os.Getenv("CONDA_PKGS_DIRS"); dirs != "" {
		writable = strings.Split(dirs, ",")
	} else if root != "" {
		writable = []string{filepath.Join(root, "pkgs")}
	}
	return rootless(readOnly), rootless(writable)
}

// run runs a conda create or install, confined by cf. conda's stdout is
// JSON (progress records separated by NUL bytes, then the result), so
// only its stderr goes to progress. A failure is a *BuildError whose Err
// is a *CondaError when conda explained itself.
func (c *Conda) run(ctx context.Context, dir string, cf *confinement, args []string, progress io.Writer) ([]byte, error) {
	argv, env := args, c.env()
	if cf != nil {
		readOnly, writable := c.confinedPaths(args[0], isMicromamba(args[0]))
		var err error
		if argv, env, err = cf.command(args, env, readOnly, append([]string{dir}, writable...)); err != nil {
			return nil, &BuildError{Dir: dir, Args: args, Err: err}
		}
	}
	stdout := &tailBuffer{max: maxCondaStdout}
	stderr := &cappedOutput{}
	var errW io.Writer = stderr
	if progress != nil {
		errW = io.MultiWriter(stderr, progress)
		fmt.Fprintf(progress, "running %s\n", strings.Join(args, " "))
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = filepath.Dir(dir)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = stdout, errW
	killGroupOnCancel(cmd)
	runErr := cmd.Run()
	out := stdout.Bytes()
	if runErr == nil {
		if ce := parseCondaFailure(out); ce != nil { // micromamba may exit 0 with success: false
			return out, &BuildError{Dir: dir, Args: args, Output: ce.Message + "\n" + stderr.String(), Err: ce}
		}
		return out, nil
	}
	be := &BuildError{Dir: dir, Args: args, Err: runErr}
	if ctxErr := ctx.Err(); ctxErr != nil {
		be.Err = fmt.Errorf("%w (%v)", ctxErr, runErr)
	}
	if ce := parseCondaFailure(out); ce != nil {
		be.Output = strings.TrimSpace(ce.Message + "\n" + stderr.String())
		if ctx.Err() == nil {
			be.Err = ce
		}
	} else {
		tail := out
		if len(tail) > outputTailMax {
			tail = tail[len(tail)-outputTailMax:]
		}
		be.Output = strings.TrimSpace(string(bytes.ReplaceAll(tail, []byte{0}, []byte{'\n'})) + "\n" + stderr.String())
	}
	return out, be
}

// condaResult is the part of conda's final JSON object that tells success
// from failure. conda: {"success": true, ...} or {"exception_name": ...,
// "message": ..., "error": ...}; micromamba: {"success": false,
// "solver_problems": [...]}.
type condaResult struct {
	Success        *bool    `json:"success"`
	Error          string   `json:"error"`
	ExceptionName  string   `json:"exception_name"`
	Message        string   `json:"message"`
	SolverProblems []string `json:"solver_problems"`
}

// parseCondaFailure returns the failure conda's output reports, or nil when
// it reports none (or is not JSON). A message alone is not a failure:
// conda says "All requested packages already installed." that way.
func parseCondaFailure(out []byte) *CondaError {
	var r condaResult
	if err := json.Unmarshal(lastJSON(out), &r); err != nil {
		return nil
	}
	switch {
	case r.ExceptionName != "" || r.Error != "":
		msg := strings.TrimSpace(r.Message)
		if msg == "" {
			msg = strings.TrimSpace(strings.TrimPrefix(r.Error, r.ExceptionName+":"))
		}
		return &CondaError{Exception: r.ExceptionName, Message: msg}
	case r.Success != nil && !*r.Success:
		msg := "the solve failed"
		if len(r.SolverProblems) > 0 {
			msg = "could not solve: " + strings.Join(r.SolverProblems, "; ")
		}
		return &CondaError{Message: msg}
	}
	return nil
}

// lastJSON returns the last JSON document of conda's --json output, which
// may be preceded by progress records separated by NUL bytes.
func lastJSON(out []byte) []byte {
	chunks := bytes.Split(out, []byte{0})
	for i := len(chunks) - 1; i >= 0; i-- {
		if c := bytes.TrimSpace(chunks[i]); len(c) > 0 {
			return c
		}
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if len(b.buf) > 2*b.max {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

// Bytes returns the kept bytes.
func (b *tailBuffer) Bytes() []byte {
	if len(b.buf) > b.max {
		return b.buf[len(b.buf)-b.max:]
	}
	return b.buf
}
