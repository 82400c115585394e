// Package safedir writes files below a trusted directory without ever
// following a symbolic link that something else planted there.
//
// codexec writes plain-file copies of code files (the on-disk mirror of
// `codexec dev`) and exports (`codexec export`) into directories that jobs,
// which run as the same user in this version, can also write to. A job could
// replace a session directory or a file with a symbolic link to somewhere
// else; every path element below the trusted base is therefore opened with
// O_NOFOLLOW (and O_DIRECTORY for directories), relative to the descriptor of
// its parent, so a link is refused instead of followed. The base itself is
// configuration (a data or output directory an operator named) and may
// contain links.
//
// Names given to this package must be single path elements (no separator, not
// "." or ".."); callers validate client input before it gets here, and this
// package checks again.
package safedir

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadName is returned for a name that is not a single, plain path element.
var ErrBadName = errors.New("safedir: not a single path element")

// checkName refuses anything but one plain path element.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") || len(name) > 255 {
		return fmt.Errorf("%w: %q", ErrBadName, name)
	}
	return nil
}
