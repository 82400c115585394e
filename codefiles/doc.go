// Package codefiles is the storage of sessions' code files and of the code
// every job ran (the runs history), in the state store, and their export to
// plain files (`codexec export`).
//
// CodeStore reads and writes them; Config sets its key prefix, limits and
// the optional on-disk copy of `codexec dev`. Client-supplied file paths
// become code-file names in one place, CodeStore.Resolve (paths.go); see
// there for what is accepted.
//
// The package knows nothing of MCP: the frontend's code-file tools call it
// and render its results and errors (ErrFileNotFound, ErrFileTooLarge,
// ErrTooManyFiles, ErrRunNotFound).
package codefiles
