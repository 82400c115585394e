package cli

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A request's headers are bounded well below net/http's 1 MiB default: a
// client that sent 1 MiB of headers and then no body held that much of the
// frontend per connection, with or without credentials (200 connections,
// 230 MiB; the listener takes 4096). Now such a request is answered 431
// without reaching the handler, and a request with a large bearer token
// still passes.
func TestHTTPHeadersBounded(t *testing.T) {
	reached := make(chan struct{}, 100)
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- struct{}{}
		_, _ = io.Copy(io.Discard, r.Body) // waits for the body, as the MCP handler does
		w.WriteHeader(http.StatusOK)
	}), slog.New(slog.DiscardHandler))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()

	var big strings.Builder
	for i := range 1000 {
		big.WriteString("X-Pad-" + strings.Repeat("a", 4) + string(rune('a'+i%26)) + ": " + strings.Repeat("b", 1000) + "\r\n")
	}
	request := func(headers string) (net.Conn, error) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		_, err = io.WriteString(c, "POST /mcp HTTP/1.1\r\nHost: "+addr+"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"+headers+"\r\n")
		return c, err
	}

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const conns = 40
	for range conns {
		c, err := request(big.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	time.Sleep(2 * time.Second) // the server has read what it will read (a wait, not a measure)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 16<<20 {
		t.Errorf("%d connections with 1 MiB of headers and no body hold %d MiB of the server", conns, grown>>20)
	}
	if n := len(reached); n > 0 {
		t.Errorf("%d requests with 1 MiB of headers reached the handler", n)
	}

	c, err := request(big.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("1 MiB of headers: %v %v, want 431", resp, err)
	}

	ok, err := request("Authorization: Bearer " + strings.Repeat("t", 16<<10) + "\r\n")
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	_, _ = io.WriteString(ok, strings.Repeat(" ", 100))
	_ = ok.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(ok), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("a 16 KiB bearer token: %v %v, want 200", resp, err)
	}
}
