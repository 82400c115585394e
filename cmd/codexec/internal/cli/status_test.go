package cli

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
)

// A port of the loopback that nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// codexec status refuses bad flags as usage errors, and says which server
// it could not reach without printing the password of its URL.
func TestStatusErrors(t *testing.T) {
	var out, errOut bytes.Buffer
	for _, args := range [][]string{{"--interval", "0"}, {"--pool", "No.Pool"}, {"--no-such-flag"}} {
		out.Reset()
		errOut.Reset()
		if rc := Main(context.Background(), append([]string{"status"}, args...), strings.NewReader(""), &out, &errOut); rc != 2 {
			t.Errorf("status %q: exit %d, want 2 (usage): %s", args, rc, errOut.String())
		}
	}
	port := closedPort(t)
	errOut.Reset()
	rc := Main(context.Background(), []string{"status", "--redis", fmt.Sprintf("redis://:hunter2@127.0.0.1:%d/0", port)}, strings.NewReader(""), &out, &errOut)
	msg := errOut.String()
	if rc != 1 || !strings.Contains(msg, fmt.Sprintf("redis at redis://***@127.0.0.1:%d/0", port)) || strings.Contains(msg, "hunter2") {
		t.Errorf("status with Redis down: exit %d, %q", rc, msg)
	}
}
