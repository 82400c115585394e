package wire

import (
	"regexp"
	"time"

	"github.com/codexec/codexec/envspec"
)

// A context is a live interpreter of a session on one worker, which keeps its
// variables between calls (worker/contexts.go). A frontend reaches it with a
// NATS request on the worker's context subject (ContextSubject), not through
// the jobs stream: a context lives in one worker's memory, so a call that
// cannot reach that worker has nothing to be redelivered to, and a plain
// request costs a fraction of a millisecond where a job's publication,
// result store and watch cost about two.

// ContextOp is what a ContextRequest asks.
type ContextOp string

const (
	ContextCreate ContextOp = "create" // start the context's interpreter
	ContextRun    ContextOp = "run"    // run code in it
	ContextReset  ContextOp = "reset"  // replace its interpreter by a fresh one (variables gone)
	ContextClose  ContextOp = "close"  // end it
	// ContextInterrupt stops the code a run of the context runs now, as
	// its timeout would (the caller went away); it answers at once.
	ContextInterrupt ContextOp = "interrupt"
	// ContextPing asks whether the worker is there; it answers at once,
	// with nothing. A frontend that cannot read the workers' presence
	// records (the state store away) asks it of a worker it sent a job
	// to: a NATS request nobody serves fails at once (ErrNoResponders).
	ContextPing ContextOp = "ping"
)

// ContextRequest is a frontend's request to the worker that holds (or is to
// hold) a context.
type ContextRequest struct {
	V  int       `json:"v"`
	Op ContextOp `json:"op"`
	// ID names the context within its scope (ValidContextID); Scope is the
	// session's, derived by the frontend: the worker answers a request of
	// another scope as it answers one for a context it never had.
	ID     string `json:"id"`
	Scope  string `json:"scope"`
	Tenant string `json:"tenant,omitempty"`
	// Principal is who, within Tenant, sent the request: a worker ends the
	// contexts of a revoked principal (worker/revoke.go).
	Principal string `json:"principal,omitempty"`
	// Code, TimeoutMS and OutputLimit are a run's.
	Code        string `json:"code,omitempty"`
	TimeoutMS   int64  `json:"timeout_ms,omitempty"`
	OutputLimit int64  `json:"output_limit,omitempty"`
	// Env, EnvID and Limits are a create's: the environment the
	// interpreter is forked from and the limits its process lives under,
	// for its whole life.
	Env    *envspec.Spec `json:"env,omitempty"`
	EnvID  string        `json:"env_id,omitempty"`
	Limits *Limits       `json:"limits,omitempty"`
	// Deadline bounds a create (an environment may have to be built). For
	// a run it is when the caller stops waiting for the answer: a worker
	// starts no run that could not answer by then (it waited behind
	// another call of the context, or the worker was stopped or cut off),
	// and answers StatusExpired, nothing run, since its caller was told
	// that no answer came and may run the code again.
	Deadline time.Time `json:"deadline,omitzero"`
	// Call names one run among the context's (the frontend's own id for
	// it); an interrupt that names it stops that run only: the run of
	// another call then going on is left alone, and the named run, if it
	// has not started, never does.
	Call string `json:"call,omitempty"`
}

// ContextReply is the worker's answer. Result is a run's outcome, in the
// shape of a job's (its JobID names the call), so that what a result can
// carry a context's call carries too; for the other ops it says how they
// went (Status, Message). Ended, when set, says the context no longer exists
// after this request and why (its interpreter was killed or died during
// the call, or it had ended before: idle, evicted, closed; then EndedBefore
// is set too, and nothing ran); Unknown says this worker never had it, in
// this scope, as far as it remembers.
type ContextReply struct {
	V           int     `json:"v"`
	Result      *Result `json:"result"`
	Ended       string  `json:"ended,omitempty"`
	EndedBefore bool    `json:"ended_before,omitempty"`
	Unknown     bool    `json:"unknown,omitempty"`
}

// ContextRecord is the state store's record of a context
// (statestore.Keys.Contexts, a hash of the scope with a field per context):
// which worker holds it, since when, in which environment. The frontend
// writes it when the context is created and deletes it when it is closed or
// found lost; the worker sets Ended when it ends the context on its own
// (idle, evicted, the worker stopping), so that its next call is told why.
type ContextRecord struct {
	V         int       `json:"v"`
	Worker    string    `json:"worker"`
	EnvID     string    `json:"env_id"`
	CreatedAt time.Time `json:"created_at"`
	Ended     string    `json:"ended,omitempty"`
}

// ContextSubject is the subject on which worker of pool serves its
// contexts. It lies outside the jobs stream's subjects (JobsSubjectPre), so
// no request is ever stored as a job.
func ContextSubject(pool, worker string) string { return "codexec.ctx." + pool + "." + worker }

var contextIDRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ValidContextID says whether id may name a context: lower-case letters,
// digits, '-' and '_', up to 64, starting with a letter or digit.
func ValidContextID(id string) bool { return contextIDRe.MatchString(id) }
