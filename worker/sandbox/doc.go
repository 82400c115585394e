// Package sandbox builds the bubblewrap command lines that confine a
// worker's warm interpreters, one-shot interpreters and installers: a
// read-only system, the interpreter and environment read-only, the
// sessions' directories writable, a private /tmp and /dev, new PID, IPC,
// UTS, network and (without root) user namespaces. It also gives each
// session a uid of its own (UIDs), kept across restarts as the owner of the
// session's working directory. Probe checks once, at a worker's start,
// that bubblewrap is there and works; apart from that it runs nothing:
// package runner runs what it builds, and package worker decides when (see
// worker/confine.go and docs/security.md).
package sandbox
