// Package envcache owns the Python environments that jobs run in.
//
// In the finished system it will hold environment specs (manager, Python
// version, package set, or the name of an environment that already exists)
// and their content-addressed identity; the managers that build them (venv,
// uv, conda); the on-disk cache on each worker with its disk budget and
// least-recently-used eviction, built once per spec per worker even under
// concurrent requests; and the placement records that tell frontends which
// worker holds which environment.
//
// Today it holds the first piece: the default environment. A worker resolves
// its interpreter with ResolvePython, then either builds its default venv
// with EnsureVenv or adopts one the operator made with ExistingVenv, and runs
// jobs with the returned bin/python.
//
// EnsureVenv is safe to call from many goroutines and many processes at once:
// a lock file (flock) in the venv's parent directory serialises builders, and
// a ready marker written last inside the venv tells a finished build from a
// half-built one. The venv is built in place rather than in a temporary
// directory renamed into place, because a venv is not relocatable: its
// scripts (pip, activate) carry their absolute path.
//
// No command runs through a shell: interpreters and installers are started
// with argv lists, and what they print is returned in a BuildError when they
// fail.
package envcache
