// Package cli wires codexec's components into the subcommands of the
// codexec binary: dev (everything in one process), frontend and worker (the
// roles of a cluster), and version. Each subcommand reads flags, with
// environment variables as their defaults, builds the components' Config
// structs and runs them until a signal or the end of stdin; shutdown runs in
// the reverse order of start-up.
package cli
