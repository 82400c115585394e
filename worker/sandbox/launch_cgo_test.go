//go:build cgo

package sandbox

// Link cgo into the test binary, as into codexec: the Go runtime then
// cannot change the credentials of every thread (AllThreadsSyscall), and
// the launcher must not rely on it.
import _ "runtime/cgo"
