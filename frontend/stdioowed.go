package frontend

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
)

// stdioMaxOwed is how many requests read from stdio may wait for their
// answers at once. Beyond it the stdio reader stops reading until answers
// are written: a client that sent requests without reading the answers
// (20,000 tools/list, each answer marshalled and held by a goroutine
// blocked on the full pipe) once took a `codexec dev` to 2.4 GiB; it now
// holds at most this many answers.
const stdioMaxOwed = 1024

// owedAnswers counts the stdio requests whose answers are not yet written,
// by id, and makes the reader wait while there are max of them.
type owedAnswers struct {
	mu    sync.Mutex
	by    map[string]int
	slots chan struct{}
}

func newOwedAnswers(max int) *owedAnswers {
	return &owedAnswers{by: map[string]int{}, slots: make(chan struct{}, max)}
}

// idKey is an id as the server writes it back: a number in any spelling
// (1, 1.0, 1e0) is the same key.
func idKey(raw json.RawMessage) (string, bool) {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil || v == nil {
		return "", false
	}
	b, err := json.Marshal(v)
	return string(b), err == nil
}

// read notes a line read from the client: a request is owed an answer and
// waits, when max answers are owed, until one is written or ctx ends (false
// then); a notifications/cancelled forgives the answer of its request,
// which the server need not write.
func (o *owedAnswers) read(ctx context.Context, line []byte) bool {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			RequestID json.RawMessage `json:"requestId"`
		} `json:"params"`
	}
	if len(bytes.TrimSpace(line)) == 0 || json.Unmarshal(line, &m) != nil {
		return true
	}
	if m.Method == "notifications/cancelled" {
		o.answered(m.Params.RequestID)
		return true
	}
	key, ok := idKey(m.ID)
	if m.Method == "" || strings.HasPrefix(m.Method, "notifications/") || !ok {
		return true
	}
	select {
	case o.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	o.mu.Lock()
	o.by[key]++
	o.mu.Unlock()
	return true
}

// wrote notes a message written to the client: an answer frees its slot.
func (o *owedAnswers) wrote(msg []byte) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(msg, &m) != nil || m.Method != "" {
		return
	}
	o.answered(m.ID)
}

func (o *owedAnswers) answered(id json.RawMessage) {
	key, ok := idKey(id)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.by[key] == 0 {
		return
	}
	if o.by[key]--; o.by[key] == 0 {
		delete(o.by, key)
	}
	<-o.slots
}

// readLine reads a line of br of at most max bytes. A longer one is read
// to its end and dropped: line is nil and over is how long it was. Over
// stdio nothing else bounds a request, and a line of 400 MiB (a client's
// bug as likely as an attack) took a `codexec dev` to 2 GiB, copied and
// decoded whole before its code was refused as too large.
func readLine(br *bufio.Reader, max int64) (line []byte, over int64, err error) {
	for {
		var part []byte
		part, err = br.ReadSlice('\n')
		if over > 0 {
			over += int64(len(part))
		} else if int64(len(line))+int64(len(part)) > max {
			over = int64(len(line)) + int64(len(part))
			line = nil
		} else {
			line = append(line, part...)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, over, err
		}
	}
}

// tooLongAnswer is the error that answers a request longer than max. Its
// id is null: the request was not read.
func tooLongAnswer(n, max int64) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{
		"code":    mcp.INVALID_REQUEST,
		"message": fmt.Sprintf("a request of %d bytes is larger than the largest a request may be (%d bytes); it was dropped unread", n, max),
	}})
	return append(b, '\n')
}
