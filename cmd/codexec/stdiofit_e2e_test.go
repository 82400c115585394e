package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/frontend"
	"github.com/mark3labs/mcp-go/mcp"
)

// rawStdio is `codexec dev` on stdio, read line by line as the TypeScript
// SDK's stdio client reads it: a line longer than a stdio message may be
// fails the test, as it drops the SDK's connection.
type rawStdio struct {
	t   *testing.T
	in  interface{ Write([]byte) (int, error) }
	out *bufio.Reader
}

func startRawStdio(t *testing.T) *rawStdio {
	t.Helper()
	cmd := exec.Command(os.Args[0], "dev")
	cmd.Env = codexecEnv("CODEXEC_DATA_DIR="+t.TempDir(), "CODEXEC_VENV="+venvFor(t))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(stopGrace):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("codexec dev stderr:\n%s", stderr.String())
		}
	})
	s := &rawStdio{t: t, in: in, out: bufio.NewReaderSize(out, 1<<20)}
	s.send(map[string]any{"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": map[string]any{
		"protocolVersion": mcp.LATEST_PROTOCOL_VERSION, "capabilities": map[string]any{}, "clientInfo": clientInfo}})
	s.await("init")
	s.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	return s
}

func (s *rawStdio) send(msg map[string]any) {
	s.t.Helper()
	b, _ := json.Marshal(msg)
	if _, err := s.in.Write(append(b, '\n')); err != nil {
		s.t.Fatal(err)
	}
}

// await returns the result of the response to request id, skipping
// notifications, and fails on an error response or on any line longer
// than frontend.StdioMessageLimit.
func (s *rawStdio) await(id string) json.RawMessage {
	s.t.Helper()
	want, _ := json.Marshal(id)
	for {
		line, err := s.out.ReadBytes('\n')
		if err != nil {
			s.t.Fatal(err)
		}
		if len(line) > frontend.StdioMessageLimit {
			s.t.Fatalf("codexec wrote a message of %d bytes on stdio, more than the %d a client reads", len(line), frontend.StdioMessageLimit)
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(line, &m); err != nil {
			s.t.Fatalf("%v: %.200s", err, line)
		}
		if string(m.ID) != string(want) {
			continue
		}
		if m.Error != nil {
			s.t.Fatalf("request %s: %s", id, m.Error)
		}
		return m.Result
	}
}

func (s *rawStdio) call(id, tool string, args map[string]any) json.RawMessage {
	s.t.Helper()
	s.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": map[string]any{"name": tool, "arguments": args}})
	return s.await(id)
}

// checkSchema fails when sc does not hold to schema: a property the schema
// lacks (it allows no others), a required one missing, or a value of
// another JSON type.
func checkSchema(t *testing.T, schema json.RawMessage, sc map[string]any) {
	t.Helper()
	var s struct {
		Properties map[string]struct {
			Type json.RawMessage `json:"type"` // a name, or a list of them
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(schema, &s); err != nil || len(s.Properties) == 0 {
		t.Fatalf("output schema %s: %v", schema, err)
	}
	for _, name := range s.Required {
		if _, ok := sc[name]; !ok {
			t.Errorf("structured content lacks required %q", name)
		}
	}
	for name, v := range sc {
		p, ok := s.Properties[name]
		if !ok {
			t.Errorf("structured content has %q, which the output schema lacks", name)
			continue
		}
		got := map[string]bool{"string": false, "boolean": false, "integer": false, "number": false, "object": false, "array": false}
		switch x := v.(type) {
		case string:
			got["string"] = true
		case bool:
			got["boolean"] = true
		case float64:
			got["number"], got["integer"] = true, x == float64(int64(x))
		case map[string]any:
			got["object"] = true
		case []any:
			got["array"] = true
		}
		var types []string
		if json.Unmarshal(p.Type, &types) != nil {
			types = []string{""}
			_ = json.Unmarshal(p.Type, &types[0])
		}
		if v == nil && slices.Contains(types, "null") {
			continue
		}
		if !slices.ContainsFunc(types, func(ty string) bool { return got[ty] }) {
			t.Errorf("structured content's %q is %T, the schema says %s", name, v, p.Type)
		}
	}
}

// A job whose stdout and stderr are each up to the output limit (1 MiB)
// of control characters, six bytes each as JSON and written twice, makes a
// result of about 24 MiB. On stdio, where one message carries at most
// 8 MiB, the result of execute_code, get_job_result, execute_code_file and
// tasks/result keeps the start and the end of each stream, with a line
// that says what was left out and why, within one message, and its
// structured content holds to the tool's output schema with the
// truncation flags set; the connection goes on. Over HTTP, which has no
// such limit, the output comes whole.
func TestDevStdioLargeOutputKeepsStartAndEnd(t *testing.T) {
	t.Parallel()
	n := 1<<20 - 64
	code := fmt.Sprintf("import sys\nsys.stdout.write('OUTSTART' + '\\x01'*%d + 'OUTEND')\nsys.stderr.write('ERRSTART' + '\\x01'*%d + 'ERREND')\n", n, n)
	wantBytes := int64(n + len("OUTSTART") + len("OUTEND"))

	check := func(t *testing.T, raw json.RawMessage, schema json.RawMessage) frontend.ExecResult {
		t.Helper()
		res, err := mcp.ParseCallToolResult(&raw)
		if err != nil {
			t.Fatal(err)
		}
		text := ""
		if len(res.Content) > 0 {
			if tc, ok := res.Content[0].(mcp.TextContent); ok {
				text = tc.Text
			}
		}
		var er frontend.ExecResult
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &er); err != nil || res.StructuredContent == nil {
			t.Fatalf("structured content %.300s: %v; text %.300q", b, err, text)
		}
		var sc map[string]any
		_ = json.Unmarshal(b, &sc)
		checkSchema(t, schema, sc)
		if res.IsError || er.Status != "ok" || er.JobID == "" || !er.StdoutTruncated || !er.StderrTruncated ||
			er.StdoutBytes != wantBytes || er.StderrBytes != wantBytes {
			t.Fatalf("isError=%v status=%s job=%s truncated=%v/%v bytes=%d/%d message=%q; text %.300q",
				res.IsError, er.Status, er.JobID, er.StdoutTruncated, er.StderrTruncated, er.StdoutBytes, er.StderrBytes, er.Message, text)
		}
		for _, s := range []struct{ name, got, start, end string }{
			{"stdout", er.Stdout, "OUTSTART\x01\x01", "\x01\x01OUTEND"},
			{"stderr", er.Stderr, "ERRSTART\x01\x01", "\x01\x01ERREND"},
		} {
			marker := "bytes of " + s.name + " left out here: the job's output is too large for one stdio message"
			if !strings.HasPrefix(s.got, s.start) || !strings.HasSuffix(s.got, s.end) || !strings.Contains(s.got, marker) ||
				!strings.Contains(s.got, "write its output to a file in the working directory and read that in pieces") || len(s.got) < 256<<10 {
				t.Errorf("%s of %d bytes: starts %.40q, ends %.40q", s.name, len(s.got), s.got, s.got[max(0, len(s.got)-40):])
			}
			if !strings.Contains(text, s.got) {
				t.Errorf("the text content lacks the %s of the structured content", s.name)
			}
		}
		return er
	}

	c := startRawStdio(t)
	c.send(map[string]any{"jsonrpc": "2.0", "id": "tools", "method": "tools/list"})
	var tools struct {
		Tools []struct {
			Name         string          `json:"name"`
			OutputSchema json.RawMessage `json:"outputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(c.await("tools"), &tools); err != nil {
		t.Fatal(err)
	}
	schemas := map[string]json.RawMessage{}
	for _, tool := range tools.Tools {
		schemas[tool.Name] = tool.OutputSchema
	}

	var jobID string
	t.Run("execute_code", func(t *testing.T) {
		jobID = check(t, c.call("exec", "execute_code", map[string]any{"code": code}), schemas["execute_code"]).JobID
	})
	t.Run("get_job_result", func(t *testing.T) {
		if jobID == "" {
			t.Skip("no job")
		}
		if er := check(t, c.call("get", "get_job_result", map[string]any{"job_id": jobID}), schemas["get_job_result"]); er.JobID != jobID {
			t.Fatalf("job %s, want %s", er.JobID, jobID)
		}
	})
	t.Run("execute_code_file", func(t *testing.T) {
		c.call("init-file", "initialize_code_file", map[string]any{"content": code, "filename": "loud.py"})
		check(t, c.call("exec-file", "execute_code_file", map[string]any{"file_path": "loud.py"}), schemas["execute_code_file"])
	})
	t.Run("tasks/result", func(t *testing.T) {
		c.send(map[string]any{"jsonrpc": "2.0", "id": "task", "method": "tools/call",
			"params": map[string]any{"name": "execute_code", "arguments": map[string]any{"code": code}, "task": map[string]any{}}})
		var created mcp.CreateTaskResult
		if err := json.Unmarshal(c.await("task"), &created); err != nil || created.Task.TaskId == "" {
			t.Fatalf("no task: %v", err)
		}
		c.send(map[string]any{"jsonrpc": "2.0", "id": "task-result", "method": "tasks/result", "params": map[string]any{"taskId": created.Task.TaskId}})
		check(t, c.await("task-result"), schemas["execute_code"])
	})
	t.Run("get_job_results", func(t *testing.T) {
		// Three jobs of a batch, each with as much output: one answer
		// carries the first, cut to its start and end within one message,
		// and says of the others to ask again; asked alone, each comes the
		// same way.
		batch := fmt.Sprintf("stdiofit-batch-%d", time.Now().UnixNano())
		var sub frontend.BatchResult
		res, err := mcp.ParseCallToolResult(ptr(c.call("submit", "submit_jobs", map[string]any{"batch_id": batch, "code": code,
			"jobs": []map[string]any{{"row": 0}, {"row": 1}, {"row": 2}}})))
		if b, _ := json.Marshal(res.StructuredContent); err != nil || json.Unmarshal(b, &sub) != nil || len(sub.Jobs) != 3 {
			t.Fatalf("submit_jobs: %v %.300s", err, b)
		}
		ids := []string{}
		for _, j := range sub.Jobs {
			ids = append(ids, j.JobID)
		}
		results := func(id string, ids ...string) frontend.BatchResult {
			t.Helper()
			var got frontend.BatchResult
			res, err := mcp.ParseCallToolResult(ptr(c.call(id, "get_job_results", map[string]any{"batch_id": batch, "job_ids": ids})))
			b, _ := json.Marshal(res.StructuredContent)
			if err != nil || json.Unmarshal(b, &got) != nil || len(got.Jobs) != len(ids) {
				t.Fatalf("get_job_results: %v %.300s", err, b)
			}
			return got
		}
		cut := func(j frontend.BatchJobResult) {
			t.Helper()
			if j.Status != "ok" || !strings.HasPrefix(j.Stdout, "OUTSTART") || !strings.HasSuffix(j.Stdout, "OUTEND") ||
				!strings.HasPrefix(j.Stderr, "ERRSTART") || !strings.HasSuffix(j.Stderr, "ERREND") ||
				!strings.Contains(j.Stdout, "bytes of stdout left out here") || !strings.Contains(j.Message, "output cut") {
				t.Errorf("job %s: status %s, stdout %d bytes starting %.20q, message %q", j.JobID, j.Status, len(j.Stdout), j.Stdout, j.Message)
			}
		}
		// Each job alone, until it has finished (a job of the batch may start
		// only after another ends), comes cut within one message.
		for i, id := range ids {
			for k := 0; ; k++ {
				got := results(fmt.Sprint("alone-", i, "-", k), id)
				if got.Jobs[0].Status != "running" {
					cut(got.Jobs[0])
					break
				}
				if k == 120 {
					t.Fatalf("job %s still runs after a minute", id)
				}
				time.Sleep(500 * time.Millisecond)
			}
		}
		// All three at once, every one finished: the first fills the
		// answer, and the others are told to ask again.
		got := results("results-all", ids...)
		cut(got.Jobs[0])
		for _, j := range got.Jobs[1:] {
			if j.Status != "running" || j.Stdout != "" || !strings.Contains(j.Message, "ask for it again") {
				t.Errorf("job %s beside a first one that fills the answer: %s %q", j.JobID, j.Status, j.Message)
			}
		}
	})
	t.Run("connection goes on", func(t *testing.T) {
		raw := c.call("after", "execute_code", map[string]any{"code": "print('still here')"})
		if !strings.Contains(string(raw), `"stdout":"still here\n"`) {
			t.Fatalf("%.300s", raw)
		}
	})

	t.Run("http has no cut", func(t *testing.T) {
		p := startProc(t, codexecEnv("CODEXEC_DATA_DIR="+t.TempDir(), "CODEXEC_VENV="+venvFor(t)), os.Args[0], "dev", "--http", "127.0.0.1:0")
		hc := httpClient(t, p.waitFor(t, urlRe, 2*time.Minute))
		res, er := call(t, hc, "execute_code", map[string]any{"code": code})
		if res.IsError || er.StdoutTruncated || er.StderrTruncated || int64(len(er.Stdout)) != wantBytes || int64(len(er.Stderr)) != wantBytes ||
			!strings.HasSuffix(er.Stdout, "OUTEND") || !strings.HasSuffix(er.Stderr, "ERREND") {
			t.Fatalf("isError=%v truncated=%v/%v stdout %d bytes, stderr %d bytes", res.IsError, er.StdoutTruncated, er.StderrTruncated, len(er.Stdout), len(er.Stderr))
		}
	})
}

func ptr[T any](v T) *T { return &v }
