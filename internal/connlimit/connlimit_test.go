package connlimit

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// serve starts an HTTP server on a Listener of max connections. POST
// requests read their body the way the frontend does (BodyPending around
// it) and tell pending when they start waiting for it; GET /block holds
// its request until release is closed.
func serve(t *testing.T, max int) (l *Listener, url string, pending chan struct{}, release chan struct{}) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l = New(inner, max)
	pending, release = make(chan struct{}, 1000), make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost:
			BodyPending(r.Context(), true)
			pending <- struct{}{}
			body, err := io.ReadAll(r.Body)
			BodyPending(r.Context(), false)
			if err != nil {
				return
			}
			fmt.Fprintf(w, "got %d bytes", len(body))
		default:
			<-release
			fmt.Fprint(w, "released")
		}
	})}
	l.Hook(srv)
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l, "http://" + inner.Addr().String(), pending, release
}

// slowBody opens a connection that sends a POST's headers and never its
// body, and waits until the server's handler waits for that body.
func slowBody(t *testing.T, addr string, pending chan struct{}) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(addr, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pending:
	case <-time.After(20 * time.Second):
		t.Fatal("the server never started reading the slow request")
	}
	return c
}

func TestSlowBodiesGiveWayToAWholeRequest(t *testing.T) {
	l, url, pending, _ := serve(t, 4)
	var slow []net.Conn
	for range 4 {
		slow = append(slow, slowBody(t, url, pending))
	}
	// Every place is taken by a connection that sent headers and nothing
	// more. A plain limit would keep this caller out for as long as they
	// stay; here it takes the oldest one's place.
	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Post(url+"/mcp", "application/json", strings.NewReader(`{"x":1}`))
	if err != nil {
		t.Fatalf("a whole request was kept out by slow ones: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "got 7 bytes" {
		t.Fatalf("answer %q", b)
	}
	if l.Evicted() < 1 {
		t.Fatalf("evicted %d connections", l.Evicted())
	}
	// The oldest slow connection is the one that went.
	slow[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := bufio.NewReader(slow[0]).ReadByte(); err == nil {
		t.Fatal("the oldest slow connection got an answer instead of being closed")
	}
}

func TestHeadersNeverSentGiveWay(t *testing.T) {
	l, url, _, _ := serve(t, 3)
	addr := strings.TrimPrefix(url, "http://")
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprint(c, "POST /mcp HTTP/1.1\r\nHo") // and nothing more
	}
	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Post(url+"/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatalf("a whole request was kept out by connections that never sent headers: %v", err)
	}
	resp.Body.Close()
	if l.Evicted() < 1 {
		t.Fatalf("evicted %d connections", l.Evicted())
	}
}

func TestRequestsBeingServedAreNeverClosedForAnother(t *testing.T) {
	l, url, _, release := serve(t, 3)
	// Three requests the server works on (a call waiting for its job, a
	// stream): each has its own connection.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	get := func() {
		defer wg.Done()
		tr := &http.Transport{DisableKeepAlives: true}
		resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Get(url + "/block")
		if err != nil {
			errs <- err
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "released" {
			errs <- fmt.Errorf("answer %q", b)
		}
	}
	for range 3 {
		wg.Add(1)
		go get()
	}
	waitFor(t, func() bool { return l.active() == 3 })
	// A fourth waits for a place instead of taking one of theirs.
	wg.Add(1)
	go get()
	time.Sleep(300 * time.Millisecond) // room for a wrong eviction to happen
	if n := l.Evicted(); n != 0 {
		t.Fatalf("%d connections with requests being served were closed for another", n)
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// active counts the connections whose requests the server works on.
func (l *Listener) active() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for c := range l.conns {
		if c.state == http.StateActive && !c.bodyPending {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCloseWakesAnAcceptWaitingForRoom(t *testing.T) {
	l, _, _, release := serve(t, 1)
	defer close(release)
	addr := l.Addr().String()
	go http.Get("http://" + addr + "/block")
	waitFor(t, func() bool { return l.active() == 1 })
	// The server's Accept now waits for room; Close must end it.
	done := make(chan struct{})
	go func() {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			defer c.Close()
		}
		<-done
	}()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	close(done)
	if _, err := l.Accept(); err == nil {
		t.Fatal("Accept after Close gave a connection")
	}
}
