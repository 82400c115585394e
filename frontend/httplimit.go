package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/codexec/codexec/internal/connlimit"
)

// The MCP Streamable HTTP handler (mcp-go) reads a request's whole body
// into memory and then decodes it, holding about five times the body at
// once; two concurrent 1 GiB bodies once got a frontend killed for memory.
// bodyLimit stands in front of it: a body larger than any legal request is
// refused with 413 before it is read, and the bodies of large requests
// draw on a budget of bytes, so that only so many are read and handled at
// once; the others wait for their turn (their bodies unread, held back by
// TCP).

// requestFraming is what a request carries besides its code: the JSON-RPC
// envelope, the tool's name, the filename and limits arguments, a session's
// package list. Far above any legal one.
const requestFraming = 64 << 10

// jsonEscapeFactor is the most a string grows by JSON encoding: one byte
// such as '<' or a control character becomes six (\u003c), as Go's
// encoding/json writes it. A request of legal code is never larger than
// this many times the code, plus framing.
const jsonEscapeFactor = 6

// largeRequest is the size above which a body draws on the budget; smaller
// ones, every ordinary call, never wait. It is small: many bodies just
// under a larger threshold, each held by its handler (while its job waits),
// once took a frontend to gigabytes.
const largeRequest = 64 << 10

// maxRequestBytes is the largest legal request of c: the largest content a
// call may send (code, or a code file's first piece), as JSON at its
// worst, plus framing.
func maxRequestBytes(c Config) int64 {
	content := max(int64(c.MaxCodeBytes), c.CodeFiles.MaxFileBytes)
	if content > (math.MaxInt64-requestFraming)/jsonEscapeFactor {
		return math.MaxInt64
	}
	return jsonEscapeFactor*content + requestFraming
}

// bodyLimit bounds the bodies of the POST requests that reach next.
type bodyLimit struct {
	next  http.Handler
	max   int64 // the largest body accepted
	large int64 // bodies above this size draw on the budget
	// bodyTimeout is how long a client has to send a body: a connection
	// that sends its headers and then a byte now and then (a slow body)
	// would otherwise hold its descriptor and buffer for ever.
	bodyTimeout time.Duration
	// paceGrace and minRate: a body holding budget must, from paceGrace
	// after its turn on, have arrived at minRate bytes a second (see
	// deadlineBody).
	paceGrace time.Duration
	minRate   int64
	log       *slog.Logger

	mu    sync.Mutex
	free  int64         // budget left
	freed chan struct{} // closed, and replaced, whenever budget comes back
	// Bodies of at most mediumRequest bytes draw on a budget of their own,
	// midFree of mediumBudget (guarded by mu, told by freed): a request
	// that declares a huge body holds the main budget for as long as it
	// takes to send, and every call with 100 KiB of code waited behind it.
	midFree int64

	waiting atomic.Int64 // requests waiting for budget now (tests watch it)
}

// mediumRequest is the largest body that draws on the medium budget
// (bodyLimit.midFree) rather than the main one, and mediumBudget that
// budget's size: a frontend holds at most about five times it in medium
// bodies, beside what the main budget bounds.
const (
	mediumRequest = 1 << 20
	mediumBudget  = 16 << 20
)

func newBodyLimit(next http.Handler, maxBody, budget int64, bodyTimeout time.Duration, log *slog.Logger) *bodyLimit {
	return &bodyLimit{next: next, max: maxBody, large: min(largeRequest, maxBody), free: max(budget, maxBody),
		midFree:     min(mediumBudget, max(budget, maxBody)),
		bodyTimeout: bodyTimeout, paceGrace: paceGrace, minRate: minBodyRate, freed: make(chan struct{}), log: log}
}

// A body that holds part of the budget makes every larger request that
// comes after it wait, so it must keep pace: paceGrace after its turn, and
// from then on, it must have sent at least minBodyRate bytes a second on
// average since its turn, or it is cut off. One connection that declared
// the largest legal body and then sent a byte a second held the whole
// budget until its body timeout, a minute, and again at each reconnect:
// every other caller's request over 64 KiB waited all that time. A client
// on a link of 2 Mbit/s keeps pace; the largest request must still arrive
// within the body timeout.
const (
	paceGrace   = 5 * time.Second
	minBodyRate = 256 << 10
)

// deadlineBody is a request body read under a deadline. Once it has been
// read to its end the deadline is lifted: the server then watches the
// connection for the client going away, and a deadline passing there would
// cancel a call that waits long for its job's result, or a stream. A body
// that never ends keeps the deadline, which also bounds the server's
// draining of it after the handler (net/http sets new deadlines for the
// connection's next request).
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController // nil: no deadline to lift
	ctx  context.Context          // the request's, told when the body is read (connlimit)
	once sync.Once

	// A paced body (one that holds budget) must have sent, at any moment
	// past turn plus grace, rate bytes a second since turn, and all of it
	// by end: the read deadline is moved to when it would fall behind.
	paced       bool
	turn, end   time.Time
	grace       time.Duration
	rate, since int64 // since: bytes read since turn
}

// pace starts the pace of a body whose turn is now, which must arrive by
// end.
func (b *deadlineBody) pace(grace time.Duration, rate int64, end time.Time) {
	if b.rc == nil || rate <= 0 {
		return
	}
	b.paced, b.turn, b.end, b.grace, b.rate, b.since = true, time.Now(), end, grace, rate, 0
	_ = b.rc.SetReadDeadline(b.due())
}

// due is when a paced body falls behind: by then it must have sent more
// than it has.
func (b *deadlineBody) due() time.Time {
	d := b.turn.Add(b.grace + time.Duration(float64(b.since)/float64(b.rate)*float64(time.Second)))
	if d.After(b.end) {
		return b.end
	}
	return d
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.paced && n > 0 && err == nil {
		b.since += int64(n)
		_ = b.rc.SetReadDeadline(b.due())
	}
	if err == io.EOF {
		b.once.Do(func() {
			if b.rc != nil {
				_ = b.rc.SetReadDeadline(time.Time{})
			}
			if b.ctx != nil {
				connlimit.BodyPending(b.ctx, false)
			}
		})
	}
	return n, err
}

func (l *bodyLimit) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.Body == nil || r.Body == http.NoBody {
		// mcp-go reads no other method's body.
		l.next.ServeHTTP(w, r)
		return
	}
	n := r.ContentLength
	if n > l.max {
		l.refuse(w, n)
		return
	}
	// Until its body is read, the request's connection is one a new
	// connection may take the place of when the server has no room
	// (connlimit): a client that sends headers and then nothing holds no
	// place others need.
	connlimit.BodyPending(r.Context(), true)
	pending := &deadlineBody{ReadCloser: r.Body, ctx: r.Context()}
	r.Body = pending
	// The body must arrive within bodyTimeout of the headers, or of the
	// moment a large request's turn comes (renew).
	renew := func() {}
	if l.bodyTimeout > 0 {
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(l.bodyTimeout)) == nil {
			pending.rc = rc
			renew = func() { pending.pace(l.paceGrace, l.minRate, time.Now().Add(l.bodyTimeout)) }
		}
	}
	if n >= 0 {
		if n > l.large {
			if !l.acquire(r.Context(), n) {
				return // the client went away while waiting
			}
			defer l.release(n)
			renew()
		}
		r.Body = http.MaxBytesReader(w, r.Body, l.max)
		l.next.ServeHTTP(w, r)
		return
	}
	// A body of unknown length (chunked): read up to the size of a large
	// request freely; past it, take a largest request's share of the
	// budget, and read on up to the limit. The handler gets the bytes.
	r.Body = http.MaxBytesReader(w, r.Body, l.max)
	body, err := io.ReadAll(io.LimitReader(r.Body, l.large+1))
	if err == nil && int64(len(body)) > l.large {
		if !l.acquire(r.Context(), l.max) {
			return
		}
		defer l.release(l.max)
		renew()
		var rest []byte
		rest, err = io.ReadAll(r.Body)
		body = append(body, rest...)
	}
	if tooLarge := new(http.MaxBytesError); errors.As(err, &tooLarge) {
		l.refuse(w, -1)
		return
	}
	if err != nil {
		writeRPCError(w, http.StatusBadRequest, mcp.PARSE_ERROR, "cannot read the request body: "+err.Error())
		return
	}
	connlimit.BodyPending(r.Context(), false)
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	l.next.ServeHTTP(w, r)
}

// refuse answers 413 with a JSON-RPC error a client can show; n is the
// body's declared size, -1 when it had none.
func (l *bodyLimit) refuse(w http.ResponseWriter, n int64) {
	size := "larger than"
	if n >= 0 {
		size = fmt.Sprintf("%d bytes; the limit is", n)
	}
	msg := fmt.Sprintf("request body is %s %d bytes (the largest code or code file a call may send, encoded as JSON, plus framing)", size, l.max)
	l.log.Warn("HTTP request refused: body too large", "content_length", n, "limit", l.max)
	// Close the connection after the answer, rather than read what is left
	// of the body first, as the server would for a small or chunked one.
	w.Header().Set("Connection", "close")
	writeRPCError(w, http.StatusRequestEntityTooLarge, mcp.INVALID_REQUEST, msg)
}

// pool is the budget a body of n bytes draws on: the medium one up to
// mediumRequest (its size is at least the smaller of mediumBudget and the
// largest body, so it can hold any such body), else the main one.
func (l *bodyLimit) pool(n int64) *int64 {
	if n <= mediumRequest {
		return &l.midFree
	}
	return &l.free
}

// acquire takes n bytes of the budget its size draws on (pool), waiting
// while it lacks them; false when ctx ended first. n is never above the
// whole budget.
func (l *bodyLimit) acquire(ctx context.Context, n int64) bool {
	counted := false
	defer func() {
		if counted {
			l.waiting.Add(-1)
		}
	}()
	free := l.pool(n)
	for {
		l.mu.Lock()
		if *free >= n {
			*free -= n
			l.mu.Unlock()
			return true
		}
		freed := l.freed
		l.mu.Unlock()
		if !counted {
			counted = true
			l.waiting.Add(1)
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return false
		}
	}
}

func (l *bodyLimit) release(n int64) {
	free := l.pool(n)
	l.mu.Lock()
	*free += n
	close(l.freed)
	l.freed = make(chan struct{})
	l.mu.Unlock()
}

// writeRPCError writes a JSON-RPC error response without an id, as an
// answer to a request that was not read.
func writeRPCError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"jsonrpc": mcp.JSONRPC_VERSION, "id": nil,
		"error": map[string]any{"code": code, "message": msg},
	})
}
