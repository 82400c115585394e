// Package connlimit bounds the connections an HTTP server holds at once,
// without letting slow clients take them all.
//
// A plain limit (accept no more than N) hands the server to whoever opens N
// connections and then sends nothing: each holds its place until a read
// deadline passes, and a client that reconnects as fast as it is cut off
// keeps every other caller out. A Listener also holds at most N, but when
// all N are taken and a new connection arrives, it closes the oldest one
// that has given the server nothing to do: one waiting for its first
// request's headers, one idle between requests, or one whose request is
// still waiting for its body (the server's handler says so with
// BodyPending). A connection whose request the server is working on (a
// call waiting for its job, a stream of notifications) is never closed for
// another. So the attacker's connections are the ones that go, oldest
// first, and a caller who sends a whole request gets its turn.
package connlimit

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// Listener is a net.Listener that holds at most max connections. Its
// ConnState and ConnContext methods must be set on the http.Server that
// serves it (Serve does that).
type Listener struct {
	net.Listener
	max int

	mu     sync.Mutex
	conns  map[*conn]struct{}
	freed  chan struct{} // closed, and replaced, when a connection ends
	closed bool

	evicted int64 // connections closed for another, for tests and logs
}

// New wraps inner so that it holds at most max connections.
func New(inner net.Listener, max int) *Listener {
	return &Listener{Listener: inner, max: max, conns: map[*conn]struct{}{}, freed: make(chan struct{})}
}

// Serve sets srv's connection hooks for l (keeping any ConnContext srv
// already has) and serves l.
func (l *Listener) Serve(srv *http.Server) error {
	l.Hook(srv)
	return srv.Serve(l)
}

// Hook sets srv's ConnState and ConnContext to l's.
func (l *Listener) Hook(srv *http.Server) {
	prevState, prevCtx := srv.ConnState, srv.ConnContext
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		l.connState(c, s)
		if prevState != nil {
			prevState(c, s)
		}
	}
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prevCtx != nil {
			ctx = prevCtx(ctx, c)
		}
		if tc, ok := c.(*conn); ok {
			ctx = context.WithValue(ctx, connKey{}, tc)
		}
		return ctx
	}
}

// Evicted says how many connections were closed to make room for others.
func (l *Listener) Evicted() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.evicted
}

// Accept waits for a connection. When max are open already, it makes room
// for the new one by closing the oldest that is idle or slow, or, when all
// are busy with requests, waits for one to end before handing it out. Only
// a connection that has arrived ever makes another give way.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &conn{Conn: c, l: l, since: time.Now()}
	if err := l.room(tc); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// Close closes the listener; the connections it gave out stay open.
func (l *Listener) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.freed) // wake an Accept waiting for room
		l.freed = make(chan struct{})
	}
	l.mu.Unlock()
	return l.Listener.Close()
}

// room adds tc once there is room for it, closing
// the oldest unproductive one when all are taken, or waiting for one to
// end when none is.
func (l *Listener) room(tc *conn) error {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return net.ErrClosed
		}
		if len(l.conns) < l.max {
			l.conns[tc] = struct{}{}
			l.mu.Unlock()
			return nil
		}
		victim := l.oldestUnproductive()
		freed := l.freed
		if victim != nil {
			victim.evicted = true
			l.evicted++
		}
		l.mu.Unlock()
		if victim != nil {
			// Closing it also ends its server goroutine.
			victim.Conn.Close()
			l.drop(victim)
			continue
		}
		<-freed
	}
}

// oldestUnproductive is the open connection that has waited longest
// without a request the server works on; l.mu is held.
func (l *Listener) oldestUnproductive() *conn {
	var oldest *conn
	for c := range l.conns {
		if c.evicted || !c.unproductive() {
			continue
		}
		if oldest == nil || c.waitingSince().Before(oldest.waitingSince()) {
			oldest = c
		}
	}
	return oldest
}

// drop forgets c, once.
func (l *Listener) drop(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.conns[c]; !ok {
		return
	}
	delete(l.conns, c)
	close(l.freed)
	l.freed = make(chan struct{})
}

func (l *Listener) connState(c net.Conn, s http.ConnState) {
	tc, ok := c.(*conn)
	if !ok {
		return
	}
	switch s {
	case http.StateClosed, http.StateHijacked:
		l.drop(tc)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	tc.state, tc.since, tc.bodyPending = s, time.Now(), false
}

// conn is one accepted connection and what the server is doing with it.
// Its fields are guarded by its listener's mu.
type conn struct {
	net.Conn
	l *Listener

	state       http.ConnState // StateNew until the server says otherwise
	since       time.Time      // when state (or bodyPending) last changed
	bodyPending bool           // its request waits for its body
	evicted     bool
}

// unproductive: waiting for headers, idle, or its request waiting for its
// body.
func (c *conn) unproductive() bool {
	return c.state == http.StateNew || c.state == http.StateIdle || (c.state == http.StateActive && c.bodyPending)
}

func (c *conn) waitingSince() time.Time { return c.since }

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.l.drop(c)
	return err
}

type connKey struct{}

// BodyPending tells the listener of the request whose context is ctx that
// its handler now waits for the request's body (pending), or has it. A
// context of another server does nothing.
func BodyPending(ctx context.Context, pending bool) {
	c, ok := ctx.Value(connKey{}).(*conn)
	if !ok {
		return
	}
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.state == http.StateActive && c.bodyPending != pending {
		c.bodyPending, c.since = pending, time.Now()
	}
}
