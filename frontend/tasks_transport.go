package frontend

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// The task router in front of each transport: it reads every request
// first, answers those that are its own (taskRouter.take), and hands the
// rest to mcp-go unchanged.

// taskHTTP is the router in front of the Streamable HTTP handler next.
func (f *Frontend) taskHTTP(srv *server.MCPServer, next http.Handler) http.Handler {
	r := &taskRouter{f: f, srv: srv}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			next.ServeHTTP(w, req)
			return
		}
		// Sized from Content-Length (bounded by the body limit in front),
		// so that reading it costs one copy of the body, not a series of
		// growing ones.
		buf := bytes.NewBuffer(make([]byte, 0, max(req.ContentLength, 0)+bytes.MinRead))
		_, err := buf.ReadFrom(req.Body)
		body := buf.Bytes()
		if tooLarge := new(http.MaxBytesError); errors.As(err, &tooLarge) {
			writeRPCError(w, http.StatusRequestEntityTooLarge, mcp.INVALID_REQUEST, "request body is too large: "+err.Error())
			return
		}
		if err != nil {
			writeRPCError(w, http.StatusBadRequest, mcp.PARSE_ERROR, "cannot read the request body: "+err.Error())
			return
		}
		_ = req.Body.Close()
		if isBatch(body) {
			writeRPCError(w, http.StatusBadRequest, batchRefused.Code, batchRefused.Message)
			return
		}
		if mayConcernTasks(body) {
			scope, valid := httpScope(req)
			ctx := context.WithValue(httpContext(req.Context(), req), requestHeaderKey{}, req.Header)
			if answer, ok := r.take(ctx, body, scope); ok && valid {
				resp, status := answer()
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				_, _ = w.Write(resp)
				return
			}
		}
		req, done, handled := f.sessionless.route(w, req, body)
		if handled {
			return
		}
		defer done()
		req.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, req)
	})
}

// sessionIDs validates a client's Mcp-Session-Id as the Streamable HTTP
// server does (a session id is valid on every frontend).
var sessionIDs server.StatelessGeneratingSessionIdManager

// httpScope is the scope of an HTTP request the router answers: the scope
// its tool calls have (scopeFrom), from its credentials and session id. A
// malformed session id, which the Streamable HTTP server would refuse,
// gets no scope.
func httpScope(req *http.Request) (string, bool) {
	sid := req.Header.Get(server.HeaderKeySessionID)
	if sid != "" {
		if _, err := sessionIDs.Validate(sid); err != nil {
			return "", false
		}
	}
	return scopeOf(httpContext(req.Context(), req), false, sid), true
}

// lockedWriter serializes the writes of the stdio server and the router
// (each writes a message in one Write), and keeps every message within
// what a stdio client reads (fitStdio).
type lockedWriter struct {
	mu    sync.Mutex
	w     io.Writer
	limit int
	log   *slog.Logger
	owed  *owedAnswers // nil: nothing counted
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	msg := fitStdio(p, l.limit, l.log)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(msg) == 0 {
		return len(p), nil
	}
	if _, err := l.w.Write(msg); err != nil {
		return 0, err
	}
	if l.owed != nil {
		l.owed.wrote(msg)
	}
	return len(p), nil
}

// taskStdio is the router in front of the stdio server: it reads in, line
// by line, answers its own requests on out, and passes every other line
// to the returned reader, which the stdio server reads. out is what the
// stdio server must write to. wait returns once every request it took is
// answered (or its context ended); ctx ending ends them.
func (f *Frontend) taskStdio(ctx context.Context, srv *server.MCPServer, in io.Reader, out io.Writer) (pass io.Reader, locked io.Writer, wait func()) {
	r := &taskRouter{f: f, srv: srv, stdio: true}
	owed := newOwedAnswers(stdioMaxOwed)
	lw := &lockedWriter{w: out, limit: f.stdioMessageLimit(), log: f.log, owed: owed}
	pr, pw := io.Pipe()
	var (
		mu     sync.Mutex
		closed bool
		calls  sync.WaitGroup
	)
	start := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if !closed {
			calls.Add(1)
		}
		return !closed
	}
	wait = func() {
		mu.Lock()
		closed = true
		mu.Unlock()
		calls.Wait()
	}
	go func() {
		br := bufio.NewReaderSize(in, 64<<10)
		for {
			line, over, err := readLine(br, f.cfg.MaxRequestBytes)
			if over > 0 {
				f.log.Warn("stdio: a request larger than the largest legal one is dropped", "bytes", over, "limit", f.cfg.MaxRequestBytes)
				_, _ = lw.Write(tooLongAnswer(over, f.cfg.MaxRequestBytes))
			}
			if !owed.read(ctx, line) {
				_ = pw.CloseWithError(ctx.Err())
				return
			}
			if answer, ok := r.take(ctx, bytes.TrimSpace(line), StdioScope); ok {
				if !start() {
					return
				}
				go func() {
					defer calls.Done()
					resp, _ := answer()
					_, _ = lw.Write(append(resp, '\n'))
				}()
				line = nil
			}
			if len(line) > 0 {
				if _, werr := pw.Write(line); werr != nil {
					return
				}
			}
			if err != nil {
				_ = pw.CloseWithError(err)
				return
			}
		}
	}()
	return pr, lw, wait
}
