package batch

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func readAll(t *testing.T, in Input) []row {
	t.Helper()
	r, err := in.open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var rows []row
	for {
		x, err := r.next()
		if errors.Is(err, io.EOF) {
			return rows
		}
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, x)
	}
}

// Parameter files: JSON Lines skip blank lines and refuse a line that is
// not an object; CSV rows become objects keyed by the header; a directory
// yields its .py files in name order.
func TestInputs(t *testing.T) {
	dir := t.TempDir()
	jl := write(t, filepath.Join(dir, "p.jsonl"), "{\"a\": 1}\n\n  {\"a\": 2}  \n")
	rows := readAll(t, Input{Script: "x", Params: jl})
	if len(rows) != 2 || string(rows[1].Params) != `{"a": 2}` || rows[1].Name != "000001" {
		t.Errorf("JSON Lines: %+v", rows)
	}
	bad := write(t, filepath.Join(dir, "bad.jsonl"), "{\"a\": 1}\n[1]\n")
	r, _ := Input{Params: bad}.open()
	if _, err := r.next(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.next(); err == nil {
		t.Error("a line that is not an object was taken")
	}
	csv := write(t, filepath.Join(dir, "p.csv"), "name,n\n\"a, b\",1\nc,2\n")
	rows = readAll(t, Input{Params: csv})
	if len(rows) != 2 || string(rows[0].Params) != `{"n":"1","name":"a, b"}` {
		t.Errorf("CSV: %+v", rows)
	}
	scripts := filepath.Join(dir, "scripts")
	_ = os.Mkdir(scripts, 0o755)
	write(t, filepath.Join(scripts, "b.py"), "print(2)\n")
	write(t, filepath.Join(scripts, "a.py"), "print(1)\n")
	write(t, filepath.Join(scripts, "readme.md"), "no\n")
	rows = readAll(t, Input{Dir: scripts})
	if len(rows) != 2 || rows[0].Name != "000000-a" || rows[0].Code != "print(1)\n" || rows[1].File != "b.py" {
		t.Errorf("directory: %+v", rows)
	}
	for _, in := range []Input{{}, {Dir: scripts, Script: "x"}, {Script: "x"}} {
		if in.check() == nil {
			t.Errorf("%+v accepted", in)
		}
	}
}

// A batch's directory read back: finished rows, the latest submission of
// each row, and a last line cut short by a killed client skipped.
func TestStateReopened(t *testing.T) {
	dir := t.TempDir()
	st, err := create(dir, Spec{ID: "abc", Retries: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.openForAppend(); err != nil {
		t.Fatal(err)
	}
	if err := st.recordSent([]submission{{Row: 0, JobID: "j0"}, {Row: 1, JobID: "j1"}, {Row: 1, Attempt: 1, JobID: "j1b"}}); err != nil {
		t.Fatal(err)
	}
	if err := st.finish(row{N: 0, Name: "000000"}, 0, jobResult{JobID: "j0", Status: "error", Stdout: "out"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(filepath.Join(dir, resultsFile), os.O_APPEND|os.O_WRONLY, 0)
	_, _ = f.WriteString(`{"row": 1, "na`)
	f.Close()

	again, err := create(dir, Spec{ID: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if again.spec.ID != "abc" || !again.done[0] || again.done[1] || again.failed != 1 || again.sent[1].JobID != "j1b" {
		t.Errorf("reopened: spec %+v done %v failed %d sent %v", again.spec, again.done, again.failed, again.sent)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "jobs", "000000", "stdout")); string(got) != "out" {
		t.Errorf("stdout file: %q", got)
	}
	x := index{root: t.TempDir()}
	if err := x.add("abc", dir); err != nil {
		t.Fatal(err)
	}
	if got, err := x.resolve("abc"); err != nil || got != dir {
		t.Errorf("resolve id: %q %v", got, err)
	}
	if _, err := x.resolve("../etc"); err == nil {
		t.Error("a path that is no batch's directory resolved")
	}
}
