package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/limits"
	"github.com/codexec/codexec/worker/runner"
	"github.com/oklog/ulid/v2"
)

// Contexts: live interpreters of sessions that keep their variables between
// calls (docs/contexts.md). A context is a job's process forked from its
// environment's zygote (runner.Interp), confined as a job is (its session's
// uid and directories, a cgroup with the job limits, rlimits, the system-call
// filter), that stays alive on this worker between calls. Frontends reach it
// with NATS requests on this worker's context subject (wire.ContextSubject);
// the state store's record of which worker holds a context is the
// frontend's. This worker holds at most MaxContexts (the least recently used
// makes room) and ends one idle for ContextIdle; either way it remembers why,
// so that the context's next call is told.

// Defaults of Config.MaxContexts and Config.ContextIdle.
const (
	DefaultMaxContexts = 16
	DefaultContextIdle = 30 * time.Minute
)

// maxEndedContexts bounds the contexts whose end a worker remembers.
const maxEndedContexts = 4096

// contextHost holds a worker's contexts.
type contextHost struct {
	w    *Worker
	stop func() // ends the subscription
	// ctx is every request's: cancelled when the worker stops, which
	// interrupts the cells that run (and kills those that go on).
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	live  map[string]*liveContext // by contextKey
	ended map[string]endedContext // why a context of this worker ended
	// interrupted holds the calls (contextKey plus call id) an interrupt
	// named while they were not running: each is refused when it comes to
	// run. Bounded by maxInterruptedCalls.
	interrupted map[string]time.Time
	closed      bool
	calls       sync.WaitGroup // requests being handled

	janitorStop chan struct{}
	janitorDone chan struct{}
}

type endedContext struct {
	why string
	at  time.Time
}

// liveContext is one context and what it holds while it lives.
type liveContext struct {
	scope, id string
	envID     string
	created   time.Time
	req       *wire.ContextRequest // the create request, for a reset

	mu     sync.Mutex // one request at a time
	interp *runner.Interp
	cwd    string
	uid    int
	set    limits.Set
	mem    int64 // what it counts against Config.ContextMemory: its memory limit
	jl     *jobLimits
	disk   *sessionDisk // the session's file system; nil: its disk limit is measured
	free   func()       // what the context holds besides its interpreter: script, environment, disk

	lastUsed time.Time // under contextHost.mu
	lastCall time.Time // under contextHost.mu: when its latest call began (its creation before one)
	busy     bool      // under contextHost.mu: a request runs in it
	// stopCall, under contextHost.mu, cancels the run in progress, and
	// call names it (wire.ContextRequest.Call; "" from an older frontend).
	stopCall context.CancelCauseFunc
	call     string
}

func contextKey(scope, id string) string { return scope + "/" + id }

// startContexts serves this worker's context subject. A worker without warm
// interpreters (spawn mode) serves it too, to say why it has no contexts.
func (w *Worker) startContexts() error {
	h := &contextHost{w: w, live: map[string]*liveContext{}, ended: map[string]endedContext{},
		janitorStop: make(chan struct{}), janitorDone: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	stop, err := w.broker.ServeContexts(w.cfg.Pool, w.cfg.ID, h.handle)
	if err != nil {
		h.cancel()
		return err
	}
	h.stop = stop
	go h.janitor()
	w.contexts = h
	return nil
}

// stopContexts ends every context and waits for the requests being handled.
func (w *Worker) stopContexts() {
	h := w.contexts
	if h == nil {
		return
	}
	h.stop()
	h.mu.Lock()
	already := h.closed
	h.closed = true
	all := make([]*liveContext, 0, len(h.live))
	for _, c := range h.live {
		all = append(all, c)
	}
	h.mu.Unlock()
	if already {
		return
	}
	h.cancel() // the cells that run are interrupted, or killed after the grace
	close(h.janitorStop)
	<-h.janitorDone
	for _, c := range all {
		c.mu.Lock() // its request, if one runs, is over
		h.endOnItsOwn(c, "the worker that held it stopped")
		c.mu.Unlock()
	}
	h.calls.Wait()
}

// handle answers one request.
func (h *contextHost) handle(data []byte) []byte {
	var req wire.ContextRequest
	reply := &wire.ContextReply{V: wire.Version}
	h.mu.Lock()
	closed := h.closed
	if !closed {
		h.calls.Add(1)
		defer h.calls.Done()
	}
	h.mu.Unlock()
	err := json.Unmarshal(data, &req)
	switch {
	case err != nil || req.V != wire.Version:
		reply.Result = h.result(&req, wire.StatusRejected, "undecodable context request, or another wire version")
	case req.Op == wire.ContextPing:
		// Here, whatever else: a frontend asks while it cannot read the
		// presence records (broker.WorkerAnswers).
		reply.Result = h.result(&req, wire.StatusOK, "here")
	case closed:
		// Its contexts are ended or about to be: as good as lost.
		reply.Result = h.result(&req, wire.StatusInternal, "the worker is stopping")
		reply.Ended, reply.EndedBefore = "the worker that held it stopped", true
	default:
		reply = h.serve(&req)
		reply.V = wire.Version
	}
	out, _ := json.Marshal(reply)
	return fitReply(reply, out, h.w.broker.MessageLimit())
}

// fitReply returns out, reply's encoding, when it fits limit bytes, and
// otherwise the encoding of reply with its output cut until it does. A
// context's answer is one NATS message, and one larger than the server
// takes is never delivered: the cell's output, up to the output limit per
// stream and six bytes in JSON for each control character, passed it (a
// cell that wrote 1 MiB of \x01 on each stream answered 12 MiB), and its
// caller waited for its timeout and 30 s more, then was told the worker
// did not answer, its output lost. Each pass keeps half of what is left of
// each stream, its beginning and its end, as an output past its cap is
// kept.
func fitReply(reply *wire.ContextReply, out []byte, limit int) []byte {
	r := reply.Result
	if len(out) <= limit || r == nil {
		return out
	}
	stdout, stderr := r.Stdout, r.Stderr
	for keep := max(len(stdout), len(stderr)) / 2; len(out) > limit; keep /= 2 {
		r.Stdout, r.StdoutTruncated = cutToFit("stdout", stdout, keep, limit, r.StdoutTruncated)
		r.Stderr, r.StderrTruncated = cutToFit("stderr", stderr, keep, limit, r.StderrTruncated)
		r.Limit = wire.LimitOutput
		out, _ = json.Marshal(reply)
		if keep == 0 {
			break
		}
	}
	return out
}

// cutToFit keeps the first and the last keep/2 bytes of s (whole
// characters), with a line where the rest was.
func cutToFit(stream, s string, keep, limit int, truncated bool) (string, bool) {
	if len(s) <= keep {
		return s, truncated
	}
	head, tail := keep/2, len(s)-keep/2
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return fmt.Sprintf("%s\n[... %d bytes of %s dropped here: a context's answer must fit one message of the broker (%d bytes); "+
		"write long output to a file and read it in pieces ...]\n%s", s[:head], tail-head, stream, limit, s[tail:]), true
}

func (h *contextHost) serve(req *wire.ContextRequest) *wire.ContextReply {
	if !wire.ValidScope(req.Scope) || !wire.ValidContextID(req.ID) {
		return &wire.ContextReply{Result: h.result(req, wire.StatusRejected, "invalid session scope or context id")}
	}
	ctx := h.ctx
	log := h.w.log.With("context", req.ID, "scope", req.Scope, "op", req.Op)
	switch req.Op {
	case wire.ContextCreate:
		return h.create(ctx, req, log)
	case wire.ContextInterrupt:
		return h.interrupt(req)
	case wire.ContextRun, wire.ContextReset, wire.ContextClose:
	default:
		return &wire.ContextReply{Result: h.result(req, wire.StatusRejected, fmt.Sprintf("unknown context operation %q", req.Op))}
	}
	c, reply := h.take(req)
	if c == nil {
		return reply
	}
	defer h.untake(c)
	if req.Op != wire.ContextRun && !req.Deadline.IsZero() && time.Now().After(req.Deadline) {
		// A reset or close that waited behind a call past the time its
		// caller waits: that caller was told no answer came, and the
		// context goes on as it is. Until 2026-12-05 a reset done then
		// ended the context (its new interpreter, made under the passed
		// deadline, failed to start), its variables gone, after its
		// caller was told to try again.
		return &wire.ContextReply{Result: h.result(req, wire.StatusExpired,
			"the "+string(req.Op)+" waited for the context (busy with another call) past the time its caller waits: nothing was done")}
	}
	switch req.Op {
	case wire.ContextRun:
		return h.run(ctx, c, req, log)
	case wire.ContextReset:
		// A fresh interpreter in the same environment and limits.
		h.end(c, "")
		again := *c.req
		again.Deadline = req.Deadline
		reply := h.create(ctx, &again, log)
		if r := reply.Result; r != nil && r.Status == wire.StatusOK {
			r.Message = fmt.Sprintf("context %s reset on %s: a fresh interpreter in environment %s; its variables are gone", req.ID, h.w.cfg.ID, r.EnvID)
		}
		return reply
	default: // close
		h.end(c, "closed")
		return &wire.ContextReply{Result: h.result(req, wire.StatusOK, "context closed"), Ended: "closed"}
	}
}

// take finds the live context of req and marks it busy (its lock held), or
// returns the reply that says why there is none: it ended (and why), or
// this worker does not know it, in this scope.
func (h *contextHost) take(req *wire.ContextRequest) (*liveContext, *wire.ContextReply) {
	key := contextKey(req.Scope, req.ID)
	h.mu.Lock()
	c := h.live[key]
	if c == nil {
		e, ok := h.ended[key]
		h.mu.Unlock()
		if ok {
			return nil, &wire.ContextReply{Result: h.result(req, wire.StatusError, "context "+req.ID+" ended: "+e.why), Ended: e.why, EndedBefore: true}
		}
		return nil, &wire.ContextReply{Result: h.result(req, wire.StatusRejected, "no context "+req.ID+" on this worker"), Unknown: true}
	}
	c.busy = true
	h.mu.Unlock()
	c.mu.Lock()
	h.mu.Lock()
	gone := h.live[key] != c
	h.mu.Unlock()
	if gone {
		// Ended while this request waited for the one before it.
		c.mu.Unlock()
		return h.take(req)
	}
	return c, nil
}

func (h *contextHost) untake(c *liveContext) {
	h.mu.Lock()
	c.busy = false
	c.lastUsed = time.Now()
	h.mu.Unlock()
	c.mu.Unlock()
}

// end closes c's interpreter and releases what it holds; why, when not
// empty, is remembered for the context's next call.
func (h *contextHost) end(c *liveContext, why string) {
	key := contextKey(c.scope, c.id)
	h.mu.Lock()
	if h.live[key] == c {
		delete(h.live, key)
		if why != "" {
			h.rememberLocked(key, why)
		}
	}
	h.mu.Unlock()
	c.close(h.w.log)
}

// errCallInterrupted is the cause of a run stopped by an interrupt request.
var errCallInterrupted = errors.New("interrupted by the caller")

// interrupt stops the run in progress of req's context, if there is one:
// the run of req.Call only, when it names one. A named call that does not
// run now (it waits behind another call of the context, or its request has
// not been handled yet: the two are handled concurrently) is remembered,
// and refused when it comes to run. Until 2026-12-05 an interrupt stopped
// whatever ran: a caller that gave up on a call waiting behind another
// stopped that other call, and its own code ran after all.
func (h *contextHost) interrupt(req *wire.ContextRequest) *wire.ContextReply {
	key := contextKey(req.Scope, req.ID)
	h.mu.Lock()
	c := h.live[key]
	stop := func(error) {}
	switch {
	case c != nil && c.stopCall != nil && (req.Call == "" || req.Call == c.call):
		stop = c.stopCall
	case req.Call != "":
		h.rememberInterruptedLocked(key + "/" + req.Call)
	}
	h.mu.Unlock()
	stop(errCallInterrupted)
	return &wire.ContextReply{Result: h.result(req, wire.StatusOK, "interrupted")}
}

// endOnItsOwn ends c when no call of it asked for it (idle, evicted, the
// worker stopping): its record in the state store says why, for its next
// call and for list_contexts.
func (h *contextHost) endOnItsOwn(c *liveContext, why string) {
	h.end(c, why)
	rec, _ := json.Marshal(wire.ContextRecord{V: wire.Version, Worker: h.w.cfg.ID, EnvID: c.envID, CreatedAt: c.created, Ended: why})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	key := h.w.cfg.Keys.Contexts(c.scope)
	if _, err := h.w.store.HGet(ctx, key, c.id); err != nil {
		return // the frontend forgot it, or never recorded it
	}
	if err := h.w.store.HSet(ctx, key, c.id, rec); err != nil {
		h.w.log.Warn("record a context's end", "context", c.id, "scope", c.scope, "err", err)
	}
}

// maxInterruptedCalls bounds the interrupted calls a worker remembers;
// interruptedCallMemory is how long it remembers one (longer than any
// caller waits for a run: the longest timeout and its slack).
const (
	maxInterruptedCalls   = 4096
	interruptedCallMemory = time.Hour
)

func (h *contextHost) rememberInterruptedLocked(call string) {
	now := time.Now()
	if h.interrupted == nil {
		h.interrupted = map[string]time.Time{}
	}
	if len(h.interrupted) >= maxInterruptedCalls {
		oldest, at := "", time.Time{}
		for k, t := range h.interrupted {
			if now.Sub(t) > interruptedCallMemory {
				delete(h.interrupted, k)
			} else if oldest == "" || t.Before(at) {
				oldest, at = k, t
			}
		}
		if len(h.interrupted) >= maxInterruptedCalls {
			delete(h.interrupted, oldest)
		}
	}
	h.interrupted[call] = now
}

// contextAnswerMargin is what a run keeps, past its timeout, before its
// caller's deadline (wire.ContextRequest.Deadline): time to save the
// session's files and send the answer.
const contextAnswerMargin = 10 * time.Second

// unwanted says why run req, about to start, must not: its caller
// interrupted it already, or will have stopped waiting for its answer
// before it could come (it waited behind another call of the context, or
// the worker was stopped or cut off while the request waited); "" when it
// may run. Its caller was told that nothing answered, and may send the code
// again: run late, it would run twice, or after its caller was told it
// failed. Under h.mu.
func (h *contextHost) unwantedLocked(c *liveContext, req *wire.ContextRequest, timeout time.Duration) (wire.Status, string) {
	if req.Call != "" {
		k := contextKey(c.scope, c.id) + "/" + req.Call
		if _, ok := h.interrupted[k]; ok {
			delete(h.interrupted, k)
			return wire.StatusCancelled, "cancelled by the caller before it started: nothing ran; the context and its variables are kept"
		}
	}
	if !req.Deadline.IsZero() && time.Now().Add(timeout+contextAnswerMargin).After(req.Deadline) {
		return wire.StatusExpired, "the call waited for the context (busy with another call, or its worker unreachable) until its " +
			"caller could no longer get the answer in time: nothing ran; the context and its variables are kept"
	}
	return "", ""
}

func (h *contextHost) rememberLocked(key, why string) {
	if len(h.ended) >= maxEndedContexts {
		oldest, at := "", time.Time{}
		for k, e := range h.ended {
			if oldest == "" || e.at.Before(at) {
				oldest, at = k, e.at
			}
		}
		delete(h.ended, oldest)
	}
	h.ended[key] = endedContext{why: why, at: time.Now()}
}

func (c *liveContext) close(log *slog.Logger) {
	if c.interp != nil {
		c.interp.Close()
		c.interp = nil
	}
	if c.jl != nil {
		go c.jl.release(log)
		c.jl = nil
	}
	if c.free != nil {
		c.free()
		c.free = nil
	}
}

// create starts the interpreter of a new context (or of a reset one, whose
// old interpreter req's caller has ended): the session's directories and
// files, the environment, the job limits, then a fork of the environment's
// warm interpreter.
func (h *contextHost) create(ctx context.Context, req *wire.ContextRequest, log *slog.Logger) *wire.ContextReply {
	w := h.w
	fail := func(status wire.Status, msg string) *wire.ContextReply {
		log.Warn("context not created", "status", status, "message", msg)
		return &wire.ContextReply{Result: h.result(req, status, msg)}
	}
	if w.pool == nil {
		return fail(wire.StatusRejected, "this worker runs every job in a fresh interpreter (--exec-mode spawn): contexts need warm interpreters (--exec-mode zygote)")
	}
	if !req.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, req.Deadline)
		defer cancel()
	}
	c := &liveContext{scope: req.Scope, id: req.ID, created: time.Now().UTC(), envID: envspec.DefaultID, req: req}
	c.lastCall = c.created
	set, err := limits.Resolve(w.cfg.Limits, w.cfg.MaxLimits, req.Limits)
	if err != nil {
		return fail(wire.StatusRejected, err.Error())
	}
	c.mem = set.Memory
	if budget := w.cfg.ContextMemory; budget > 0 && c.mem <= 0 {
		c.mem = budget // no memory limit: it may take all of it
	} else if budget > 0 && c.mem > budget {
		return fail(wire.StatusLimit, fmt.Sprintf("a context's memory limit (%s) may not pass what this worker keeps for "+
			"its contexts' memory (%s, --context-memory): ask for less memory in its limits",
			memoryText(c.mem), memoryText(budget)))
	}
	h.endForgotten(ctx, req.Scope, req.ID, log)
	if msg := h.reserve(c); msg != "" {
		return fail(wire.StatusLimit, msg)
	}
	defer h.untake(c)
	res, err := h.startInterp(ctx, c, req, log)
	if err != nil {
		h.end(c, "")
		return &wire.ContextReply{Result: res}
	}
	log.Info("context created", "env", c.envID, "ms", time.Since(c.created).Milliseconds())
	res.Message = fmt.Sprintf("context %s created on %s in environment %s", req.ID, w.cfg.ID, c.envID)
	return &wire.ContextReply{Result: res}
}

// endForgotten ends this worker's context of scope and id, asked to be
// created anew, when the state store holds no record of it that names this
// worker: a frontend asks for a context only under a name the session's
// records lack, so one that lives here under it was forgotten, declared
// lost while this worker was stopped or cut off past its presence record
// (the caller told that its variables are gone). It is ended, and the name
// is the new context's. Until 2026-12-05 it lived on until it was idle for
// --context-idle (30 minutes by default), holding a slot and its memory
// budget, and every create_context of that name on this worker failed with
// "context c exists already" while list_contexts showed none. A context
// busy with a request, or whose record the store cannot give (unreachable),
// is left alone.
func (h *contextHost) endForgotten(ctx context.Context, scope, id string, log *slog.Logger) {
	key := contextKey(scope, id)
	h.mu.Lock()
	old := h.live[key]
	h.mu.Unlock()
	if old == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	data, err := h.w.store.HGet(rctx, h.w.cfg.Keys.Contexts(scope), id)
	cancel()
	switch {
	case errors.Is(err, statestore.ErrNotFound):
	case err != nil:
		return
	default:
		var rec wire.ContextRecord
		if json.Unmarshal(data, &rec) == nil && rec.Worker == h.w.cfg.ID {
			return // recorded here: it exists
		}
	}
	if !old.mu.TryLock() {
		return // a request runs in it
	}
	defer old.mu.Unlock()
	h.mu.Lock()
	still := h.live[key] == old && !old.busy
	h.mu.Unlock()
	if still {
		log.Info("context forgotten by the frontend (no record of it here); ending it for the new one")
		h.end(old, "")
	}
}

// reserve puts c, busy, in the live contexts, ending the least recently
// used idle one when the worker holds MaxContexts; it returns why it cannot
// when all are busy, or when c exists.
func (h *contextHost) reserve(c *liveContext) string {
	key := contextKey(c.scope, c.id)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return "the worker is stopping"
	}
	if h.live[key] != nil {
		h.mu.Unlock()
		return "context " + c.id + " exists already"
	}
	// Room for c: fewer than MaxContexts, and the memory limits of all,
	// c's included, within ContextMemory. Idle ones make it.
	count, used := len(h.live), c.mem
	for _, o := range h.live {
		used += o.mem
	}
	budget := h.w.cfg.ContextMemory
	full := func() bool { return count >= h.w.cfg.MaxContexts || (budget > 0 && used > budget) }
	overCount := count >= h.w.cfg.MaxContexts
	var victims []*liveContext
	if full() {
		idle := make([]*liveContext, 0, len(h.live))
		for _, o := range h.live {
			if !o.busy {
				idle = append(idle, o)
			}
		}
		held := h.heldByOwner(c)
		sort.Slice(idle, func(i, j int) bool {
			if a, b := held[idle[i].owner()], held[idle[j].owner()]; a != b {
				return a > b
			}
			return idle[i].lastUsed.Before(idle[j].lastUsed)
		})
		for _, o := range idle {
			if !full() {
				break
			}
			// Not one a request has just taken (it holds the lock).
			if o.mu.TryLock() {
				victims = append(victims, o)
				count--
				used -= o.mem
			}
		}
		if full() {
			h.mu.Unlock()
			for _, v := range victims {
				v.mu.Unlock()
			}
			if overCount && count >= h.w.cfg.MaxContexts {
				return fmt.Sprintf("this worker holds %d contexts, all running code: try again later", len(h.live))
			}
			return fmt.Sprintf("this worker's contexts hold memory limits of %s of the %s it keeps for them "+
				"(--context-memory), and those that could make room are running code: try again later, "+
				"or ask for less memory", memoryText(used-c.mem), memoryText(budget))
		}
	}
	c.busy, c.lastUsed = true, time.Now()
	delete(h.ended, key)
	h.live[key] = c
	h.mu.Unlock()
	why := fmt.Sprintf("evicted: the worker holds at most %d contexts and this one was the least recently used of those who hold the most", h.w.cfg.MaxContexts)
	if !overCount {
		why = fmt.Sprintf("evicted: the worker keeps %s for its contexts' memory limits, a new context needed room, "+
			"and this one was the least recently used of those who hold the most", memoryText(budget))
	}
	for _, v := range victims {
		h.w.log.Info("context evicted", "context", v.id, "scope", v.scope)
		h.endOnItsOwn(v, why)
		v.mu.Unlock()
	}
	c.mu.Lock()
	return ""
}

// heldByOwner counts the live contexts of each owner, new (about to be
// made) included. Eviction takes from the owner holding the most, the
// least recently used of its idle ones first: one tenant (one session,
// without authentication) making contexts ends its own before anyone
// else's, where plain least-recently-used order let it end every other
// tenant's.
func (h *contextHost) heldByOwner(new *liveContext) map[string]int {
	held := map[string]int{new.owner(): 1}
	for _, o := range h.live {
		held[o.owner()]++
	}
	return held
}

// owner is whose share of the worker's contexts c counts against: its
// tenant's, or without one, its session's.
func (c *liveContext) owner() string {
	if c.req != nil && c.req.Tenant != "" {
		return "t\x00" + c.req.Tenant
	}
	return "s\x00" + c.scope
}

// startInterp prepares c's session and starts its interpreter; the Result
// says how it went, and err is set when it failed.
func (h *contextHost) startInterp(ctx context.Context, c *liveContext, req *wire.ContextRequest, log *slog.Logger) (*wire.Result, error) {
	w := h.w
	job := &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: w.cfg.Pool, Scope: req.Scope,
		Env: req.Env, EnvID: req.EnvID, Limits: req.Limits, Deadline: req.Deadline}
	fail := func(status wire.Status, msg string) (*wire.Result, error) {
		log.Warn("context not started", "status", status, "message", msg)
		return h.result(req, status, msg), errors.New(msg)
	}
	set, err := limits.Resolve(w.cfg.Limits, w.cfg.MaxLimits, req.Limits)
	if err != nil {
		return fail(wire.StatusRejected, err.Error())
	}
	cwd, scripts, uid, disk, err := w.sessionDirs(ctx, req.Scope)
	if err != nil {
		return fail(wire.StatusInternal, "prepare session directory: "+err.Error())
	}
	var frees []func()
	c.free = func() {
		for i := len(frees) - 1; i >= 0; i-- {
			frees[i]()
		}
	}
	frees = append(frees, func() { w.releaseSession(req.Scope, disk) })
	if err := disk.setLimit(set.Disk); err != nil {
		return fail(wire.StatusInternal, "set the disk limit: "+err.Error())
	}
	if _, err := w.restoreWorkspace(ctx, req.Scope, cwd, uid, disk, set.Disk, "", log); err != nil {
		return fail(wire.StatusInternal, "restore the session's files: "+err.Error())
	}
	script := filepath.Join(scripts, "context_"+req.ID+".py")
	_ = os.Remove(script)
	if err := writeNew(script, string(runner.ContextSource)); err != nil {
		return fail(wire.StatusInternal, "save the context's code: "+err.Error())
	}
	frees = append(frees, func() { removeScript(script, log) })
	spec := w.spec(script, cwd, cwd)
	if req.Env != nil {
		env, _, err := w.ensureEnv(ctx, job, log)
		if err != nil {
			r := w.envFailure(job, 0, err)
			return fail(r.Status, r.Message)
		}
		frees = append(frees, env.Release)
		spec, c.envID = w.envSpec(env, script, cwd, cwd), env.ID
	}
	jl, err := w.prepareLimits(job, set, &spec, cwd, scripts, uid, disk)
	if err != nil {
		return fail(wire.StatusInternal, err.Error())
	}
	c.jl, c.cwd, c.uid, c.set, c.disk = jl, cwd, uid, set, disk
	it, err := w.pool.StartInterp(ctx, spec)
	if err != nil {
		return fail(wire.StatusInternal, "start the context's interpreter: "+err.Error())
	}
	c.interp = it
	// Between calls what the context left running (threads, processes)
	// runs at the least CPU weight: only on CPUs that no job wants. It
	// holds no job slot then, and without this a few contexts' background
	// loops slowed every job of the worker.
	jl.setIdle(true, log)
	if disk == nil && set.Disk > 0 {
		// What the context leaves running writes between calls too,
		// when no call's watch measures it.
		stop := make(chan struct{})
		frees = append(frees, func() { close(stop) })
		go h.watchDiskBetweenCalls(c, stop, diskWatchInterval)
	}
	res := h.result(req, wire.StatusOK, "")
	res.EnvID = c.envID
	res.ExitCode = 0
	res.DurationMS = float64(time.Since(c.created).Microseconds()) / 1000
	return res, nil
}

// run runs req's code in c. When the interpreter ends (killed after its
// cell ignored the interrupt, a limit, the cell's own exit), the context
// ends with it, and the reply says so.
func (h *contextHost) run(ctx context.Context, c *liveContext, req *wire.ContextRequest, log *slog.Logger) *wire.ContextReply {
	w := h.w
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	if timeout <= 0 || timeout > w.cfg.MaxTimeout {
		timeout = w.cfg.MaxTimeout
	}
	limit := req.OutputLimit
	if limit <= 0 || limit > w.cfg.OutputLimit {
		limit = w.cfg.OutputLimit
	}
	res := h.result(req, wire.StatusOK, "")
	res.EnvID = c.envID
	select {
	case <-c.interp.Ended():
		// Its process died between calls (a thread of its own, a limit):
		// nothing runs in its place.
		_, err := c.interp.Exec(ctx, runner.CellSpec{})
		why := strings.TrimPrefix(err.Error(), runner.ErrInterpEnded.Error()+": ")
		h.end(c, why)
		res.Status, res.Message = wire.StatusError, "context "+c.id+" ended: "+why
		return &wire.ContextReply{Result: res, Ended: why, EndedBefore: true}
	default:
	}
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	h.mu.Lock()
	status, why := h.unwantedLocked(c, req, timeout)
	if status == "" {
		c.stopCall, c.call = cancel, req.Call
	}
	h.mu.Unlock()
	if status != "" {
		res.Status, res.ExitCode, res.Message = status, -1, why
		log.Info("context call not run", "status", status)
		return &wire.ContextReply{Result: res}
	}
	defer func() {
		h.mu.Lock()
		c.stopCall, c.call = nil, ""
		h.mu.Unlock()
	}()
	ws, err := w.restoreWorkspace(ctx, c.scope, c.cwd, c.uid, c.disk, c.set.Disk, "", log)
	if err != nil {
		log.Warn("the session's files could not be restored; the call runs on this worker's copy", "err", err)
	}
	base := c.jl.usage()
	if c.disk == nil && c.set.Disk > 0 {
		// As for a job: measured while the call runs; a session file
		// system holds the limit itself.
		go watchDisk(jctx, cancel, c.cwd, c.set.Disk, diskWatchInterval)
	}
	res.StartedAt = time.Now().UTC()
	h.mu.Lock()
	c.lastCall = res.StartedAt
	h.mu.Unlock()
	c.jl.setIdle(false, log)
	out, err := c.interp.Exec(jctx, runner.CellSpec{Code: req.Code, Timeout: timeout, OutputLimit: limit})
	c.jl.setIdle(true, log)
	res.FinishedAt = time.Now().UTC()
	diskStopped := errors.Is(context.Cause(jctx), errDiskLimit)
	if note := w.saveWorkspace(ctx, ws, res.JobID, c.cwd, log); note != "" {
		res.Notes = append(res.Notes, note)
	}
	w.reportWorkdir(ctx, c.scope, req.Tenant, c.disk, c.cwd, log)
	res.ExitCode, res.Signal = out.ExitCode, out.Signal
	res.Stdout, res.Stderr = string(out.Stdout), string(out.Stderr)
	res.StdoutTruncated, res.StderrTruncated = out.StdoutTruncated, out.StderrTruncated
	res.StdoutBytes, res.StderrBytes = out.StdoutBytes, out.StderrBytes
	res.DurationMS = float64(out.Duration.Microseconds()) / 1000
	if out.StdoutTruncated || out.StderrTruncated {
		res.Limit = wire.LimitOutput
	}
	reply := &wire.ContextReply{Result: res}
	switch {
	case errors.Is(context.Cause(jctx), errJobRevoked):
		why := revokedMessage(req.Tenant, req.Principal)
		res.Status, res.ExitCode, res.Limit = wire.StatusCancelled, -1, ""
		res.Message = why + ": the call was stopped and the context ended; its variables are lost"
		reply.Ended = why
		h.end(c, why)
		log.Info("context of a revoked identity ended")
	case errors.Is(err, runner.ErrInterpEnded):
		why := strings.TrimPrefix(err.Error(), runner.ErrInterpEnded.Error()+": ")
		res.Status = wire.StatusError
		switch {
		case out.TimedOut:
			res.Status = wire.StatusTimeout
			why = fmt.Sprintf("timed out after %s, and %s", timeout, why)
		case c.jl.usage().OOMKills > base.OOMKills:
			res.Status, res.Limit = wire.StatusLimit, wire.LimitMemory
			why = fmt.Sprintf("memory limit reached (%d MiB): %s", c.set.Memory>>20, why)
		}
		res.Message = "the context's interpreter ended (" + why + "); its variables are lost"
		reply.Ended = why
		h.end(c, why)
		log.Info("context ended", "why", why)
	case h.ctx.Err() != nil:
		why := "the worker that held it stopped"
		res.Status, res.ExitCode, res.Message = wire.StatusInternal, -1, "context "+c.id+" ended: "+why+"; its variables are lost"
		reply.Ended = why
	case errors.Is(context.Cause(jctx), errCallInterrupted):
		res.Status, res.ExitCode = wire.StatusError, -1
		res.Message = "cancelled by the caller: KeyboardInterrupt stopped the code; the context and its variables are kept"
	case diskStopped:
		res.Status, res.Limit = wire.StatusLimit, wire.LimitDisk
		res.Message = fmt.Sprintf("disk limit reached (%d MiB used by the working directory): KeyboardInterrupt stopped the code; the context and its variables are kept", c.set.Disk>>20)
		// As after a job: what the call wrote past the limit (a
		// fallocate passes it by far between two samples) goes.
		if trimWorkspace(c.cwd, res.StartedAt, c.set.Disk) {
			res.Message += "; what it wrote in this call was removed"
		} else {
			res.Message += "; files from before this call keep the working directory over it"
		}
	case err != nil:
		res.Status, res.ExitCode, res.Message = wire.StatusInternal, -1, "run in the context: "+err.Error()
	case out.TimedOut:
		res.Status = wire.StatusTimeout
		res.Message = fmt.Sprintf("timed out after %s: KeyboardInterrupt stopped the code; the context and its variables are kept", timeout)
	case out.Error != "":
		res.Status, res.Message = wire.StatusError, out.Error
	}
	return reply
}

// watchDiskBetweenCalls measures the working directory of c, whose disk
// limit no file system holds, while no call of it runs (each call has a
// watch of its own): a thread or process the context left running writes
// between calls as well, and until 2026-12-04 nothing measured it then, so
// a context at disk_mb=20 filled the host's disk. Past the limit it ends
// the context, with everything it started, and removes what changed since
// its last call, as a job's leftovers are removed when it is over.
func (h *contextHost) watchDiskBetweenCalls(c *liveContext, stop <-chan struct{}, interval time.Duration) {
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		h.mu.Lock()
		idle, since, callStart := h.live[contextKey(c.scope, c.id)] == c && !c.busy, c.lastUsed, c.lastCall
		h.mu.Unlock()
		start := time.Now()
		if !idle || DiskUsage(c.cwd) <= c.set.Disk {
			t.Reset(max(interval, 10*time.Since(start)))
			continue
		}
		if !c.mu.TryLock() {
			t.Reset(interval) // a call has just taken it, and measures it
			continue
		}
		h.mu.Lock()
		still := h.live[contextKey(c.scope, c.id)] == c && !c.busy
		h.mu.Unlock()
		if !still {
			c.mu.Unlock()
			t.Reset(interval)
			continue
		}
		cwd, limit := c.cwd, c.set.Disk
		why := fmt.Sprintf("disk limit reached between calls (%d MiB in the working directory): what it left running wrote past it", limit>>20)
		h.w.log.Info("context past its disk limit between calls; ending it", "context", c.id, "scope", c.scope)
		h.endOnItsOwn(c, why) // closes stop
		c.mu.Unlock()
		// What its leftovers wrote since its last call, and if that is not
		// enough, what changed since that call began (a writer it started
		// then may have passed the limit after the call's last sample).
		if !trimWorkspace(cwd, since, limit) && !trimWorkspace(cwd, callStart, limit) {
			h.w.log.Warn("a context's working directory stays over its disk limit", "context", c.id, "scope", c.scope)
		}
		return
	}
}

// result is a reply's Result before the call's facts are in.
func (h *contextHost) result(req *wire.ContextRequest, status wire.Status, msg string) *wire.Result {
	now := time.Now().UTC()
	return &wire.Result{V: wire.Version, JobID: ulid.Make().String(), Scope: req.Scope, Status: status, ExitCode: -1,
		Message: msg, WorkerID: h.w.cfg.ID, EnvID: envspec.DefaultID, StartedAt: now, FinishedAt: now}
}

// janitor ends the contexts idle for ContextIdle.
func (h *contextHost) janitor() {
	defer close(h.janitorDone)
	idle := h.w.cfg.ContextIdle
	t := time.NewTicker(min(max(idle/4, 10*time.Millisecond), time.Minute))
	defer t.Stop()
	for {
		select {
		case <-h.janitorStop:
			return
		case <-t.C:
		}
		h.mu.Lock()
		var due []*liveContext
		for _, c := range h.live {
			if !c.busy && time.Since(c.lastUsed) >= idle {
				due = append(due, c)
			}
		}
		h.mu.Unlock()
		for _, c := range due {
			if !c.mu.TryLock() {
				continue // a request has just taken it
			}
			h.mu.Lock()
			still := h.live[contextKey(c.scope, c.id)] == c && !c.busy && time.Since(c.lastUsed) >= idle
			h.mu.Unlock()
			if still {
				h.w.log.Info("context idle; ending it", "context", c.id, "scope", c.scope)
				h.endOnItsOwn(c, fmt.Sprintf("it was idle for %s, the longest a context waits for its next call", idle))
			}
			c.mu.Unlock()
		}
	}
}

// memoryText writes a number of bytes in MiB; 0 or less is "none".
func memoryText(n int64) string {
	if n <= 0 {
		return "none"
	}
	return fmt.Sprintf("%d MiB", n>>20)
}
