package frontend

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/codexec/codexec/frontend/auth"
	"github.com/mark3labs/mcp-go/mcp"
)

// maxCallerRequests bounds the requests to /mcp that one identified caller
// (an authenticated identity, or the Authorization header a proxy in front
// sets) has in progress on a frontend at once. The HTTP listener holds at
// most 4,096 connections and never closes one whose request is being
// served for another (internal/connlimit): a notification stream, a call
// waiting for its job, a tasks/result waiting for its task. One client
// that opened 4,096 notification streams on one session, in two seconds,
// kept every other caller out for as long as it held them. Past the bound
// a request is refused with 429 at once, so at least sixteen callers are
// needed to take every place. Callers that nothing identifies (no
// authentication and no Authorization header: every caller of a loopback
// `codexec dev --http`) are not bounded: nothing tells them apart.
const maxCallerRequests = 256

// callerRequests counts each identified caller's requests in progress.
type callerRequests struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *callerRequests) take(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[key] >= maxCallerRequests {
		return false
	}
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
	return true
}

func (c *callerRequests) give(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[key]--; c.n[key] <= 0 {
		delete(c.n, key)
	}
}

// callerKey is who request r comes from, for maxCallerRequests: "" when
// nothing identifies it.
func callerKey(r *http.Request) string {
	if id, ok := auth.FromContext(r.Context()); ok {
		return identityPart(id)
	}
	if a := authorizationHeader(r); a != "" {
		return "header\x00" + digest(a)
	}
	return ""
}

// boundCallers refuses a request of a caller that has maxCallerRequests in
// progress already.
func (f *Frontend) boundCallers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := callerKey(r)
		if key == "" {
			next.ServeHTTP(w, r)
			return
		}
		if !f.callers.take(key) {
			w.Header().Set("Retry-After", "1")
			writeRPCError(w, http.StatusTooManyRequests, mcp.INVALID_REQUEST, fmt.Sprintf(
				"you have %d requests in progress on this server, the most one caller may hold at once "+
					"(notification streams and calls waiting for their results included): end some, then try again", maxCallerRequests))
			return
		}
		defer f.callers.give(key)
		next.ServeHTTP(w, r)
	})
}
