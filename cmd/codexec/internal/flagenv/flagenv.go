// Package flagenv is the command line of codexec's commands: flags whose
// defaults come from environment variables named in their help, parsed
// into a usage error (exit status 2) when the command line, or one of the
// variables, is wrong. cli and bench both register their flags here.
package flagenv

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/codexec/codexec/internal/units"
)

// UsageError is an error in the command line or in a variable it reads:
// the command exits with status 2, not 1.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Flags is a flag.FlagSet whose flags take their defaults from
// environment variables. Each registration takes the variable's name, env:
// a variable that is set and not empty replaces the default, and its name
// ends the flag's help as " ($ENV)". An empty env registers a flag with no
// variable, whose help is help as given. A variable that does not parse is
// reported by Parse.
type Flags struct {
	fs   *flag.FlagSet
	errs []error
}

// New returns an empty set of flags named name ("codexec worker"); help
// and parse errors go to out.
func New(name string, out io.Writer) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	return &Flags{fs: fs}
}

// fromEnv is def, or env's value as parse reads it when the variable is set
// and not empty; a value parse refuses is recorded for Parse, and what
// parse returned with the error is the default (the help shows it).
func fromEnv[T any](f *Flags, env string, def T, parse func(string) (T, error)) T {
	if env == "" {
		return def
	}
	v, ok := os.LookupEnv(env)
	if !ok || v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil {
		f.errs = append(f.errs, fmt.Errorf("$%s: %w", env, err))
	}
	return x
}

// withEnv is help as a flag shows it: ending with " ($ENV)" when there is
// a variable.
func withEnv(help, env string) string {
	if env == "" {
		return help
	}
	return help + " ($" + env + ")"
}

// String registers a string flag.
func (f *Flags) String(p *string, name, env, def, help string) {
	def = fromEnv(f, env, def, func(v string) (string, error) { return v, nil })
	f.fs.StringVar(p, name, def, withEnv(help, env))
}

// Bool registers a boolean flag; its variable is read by strconv.ParseBool.
func (f *Flags) Bool(p *bool, name, env string, def bool, help string) {
	def = fromEnv(f, env, def, strconv.ParseBool)
	f.fs.BoolVar(p, name, def, withEnv(help, env))
}

// Int registers an integer flag.
func (f *Flags) Int(p *int, name, env string, def int, help string) {
	def = fromEnv(f, env, def, strconv.Atoi)
	f.fs.IntVar(p, name, def, withEnv(help, env))
}

// Duration registers a flag of a Go duration ("90s", "10m").
func (f *Flags) Duration(p *time.Duration, name, env string, def time.Duration, help string) {
	def = fromEnv(f, env, def, time.ParseDuration)
	f.fs.DurationVar(p, name, def, withEnv(help, env))
}

// Bytes registers a size flag, read by units.ParseSize ("1048576",
// "512KiB", "1MB"); the help shows its default in KiB or MiB when one
// divides it.
func (f *Flags) Bytes(p *int64, name, env string, def int64, help string) {
	Value(f, p, name, env, def, parseSize, func(n int64) string { return units.FormatSize(n, units.MiB) }, help)
}

func parseSize(s string) (int64, error) {
	n, err := units.ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: %v (use e.g. 1048576, 512KiB, 1MiB, 1MB)", strings.TrimSpace(s), err)
	}
	return n, nil
}

// Choice registers a string flag whose value must be one of options.
func (f *Flags) Choice(p *string, name, env, def string, options []string, help string) {
	check := func(v string) (string, error) {
		if !slices.Contains(options, v) {
			return v, fmt.Errorf("%q is not one of %s", v, strings.Join(options, ", "))
		}
		return v, nil
	}
	Value(f, p, name, env, def, check, func(v string) string { return v }, help)
}

// Value registers a flag of any type: parse reads the command line's
// value and the variable's, and show writes the default, after the
// variable is read, at the end of the help as " (default SHOW)". A value
// parse refuses leaves *p as it was.
func Value[T any](f *Flags, p *T, name, env string, def T, parse func(string) (T, error), show func(T) string, help string) {
	*p = fromEnv(f, env, def, parse)
	f.fs.Func(name, fmt.Sprintf("%s (default %s)", withEnv(help, env), show(*p)), func(s string) error {
		v, err := parse(s)
		if err == nil {
			*p = v
		}
		return err
	})
}

// Parse parses args, which must be flags only: -h is flag.ErrHelp, as
// is; a bad flag, an argument that is not a flag, or a variable that did
// not parse is a UsageError.
func (f *Flags) Parse(args []string) error {
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return UsageError{err}
	}
	if f.fs.NArg() > 0 {
		return UsageError{fmt.Errorf("unexpected arguments: %s", strings.Join(f.fs.Args(), " "))}
	}
	if len(f.errs) > 0 {
		return UsageError{errors.Join(f.errs...)}
	}
	return nil
}

// Given reports whether the command line set flag name (after Parse), as
// against its default or its variable.
func (f *Flags) Given(name string) bool {
	given := false
	f.fs.Visit(func(fl *flag.Flag) { given = given || fl.Name == name })
	return given
}
