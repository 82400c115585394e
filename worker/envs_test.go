package worker

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/codexec/codexec/envcache"
	"github.com/codexec/codexec/wire"
)

func TestLineWriter(t *testing.T) {
	t.Parallel()
	var got []string
	w := &lineWriter{fn: func(s string) { got = append(got, s) }}
	for _, p := range []string{"Resolved 2 pack", "ages\nInstalled\r\n\n", "last"} {
		if _, err := w.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	if want := []string{"Resolved 2 packages", "Installed", "last"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// An installer line that never ends (a progress bar redrawn with \r) is
// passed on in bounded pieces instead of being held whole.
func TestLineWriterBoundsAnUnterminatedLine(t *testing.T) {
	t.Parallel()
	var got []string
	w := &lineWriter{fn: func(s string) { got = append(got, s) }}
	chunk := strings.Repeat("x", 999) + "\r"
	var want strings.Builder
	for range 1000 { // about 1 MB, no newline
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
		want.WriteString(chunk)
		if n, c := w.buf.Len(), w.buf.Cap(); n >= maxLineBytes || c > 16*maxLineBytes {
			t.Fatalf("after %d bytes the writer holds %d (capacity %d); want under %d", want.Len(), n, c, maxLineBytes)
		}
	}
	w.Flush()
	if len(got) < want.Len()/maxLineBytes {
		t.Fatalf("%d pieces for %d bytes", len(got), want.Len())
	}
	for _, piece := range got {
		if len(piece) > maxLineBytes {
			t.Fatalf("a piece of %d bytes, want at most %d", len(piece), maxLineBytes)
		}
	}
	// Nothing is lost but the \r that ended a piece.
	stripped := strings.ReplaceAll(want.String(), "\r", "")
	if joined := strings.ReplaceAll(strings.Join(got, ""), "\r", ""); joined != stripped {
		t.Errorf("pieces hold %d bytes of x, want %d", len(joined), len(stripped))
	}
}

func TestLabelsValidated(t *testing.T) {
	t.Parallel()
	c := Config{DataDir: "/tmp/x", Labels: map[string]string{"gpu": "1"}}.WithDefaults()
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []map[string]string{{"gpu": ""}, {"": "1"}, {"a b": "1"}, {"gpu": "1,2"}} {
		c.Labels = bad
		if err := c.validate(); err == nil {
			t.Errorf("labels %v accepted", bad)
		}
	}
}

// The installer's output of a failed build goes back to the caller as the
// job's stderr, and it may name the operator's package indexes with their
// credentials (pip and uv print the URLs they tried): they are hidden.
func TestEnvFailureHidesIndexCredentials(t *testing.T) {
	t.Parallel()
	be := &envcache.BuildError{
		Args:   []string{"uv", "pip", "install", "--index-url", "https://user:SECRETTOKEN@index.example/simple"},
		Output: "Looking in indexes: https://user:SECRETTOKEN@index.example/simple\nERROR: No matching distribution found\n",
		Err:    errors.New("exit status 1"),
	}
	res := (&Worker{}).envFailure(&wire.Job{ID: "01M8ZV7SBZG30MNP8NKQMJZ0Q9"}, 0, be)
	for name, s := range map[string]string{"stderr": res.Stderr, "message": res.Message} {
		if strings.Contains(s, "SECRET") {
			t.Errorf("the result's %s shows the index's credentials: %q", name, s)
		}
	}
	if !strings.Contains(res.Stderr, "https://***@index.example/simple") || res.StderrBytes != int64(len(res.Stderr)) {
		t.Errorf("stderr %q (%d bytes): want the installer's output, credentials hidden", res.Stderr, res.StderrBytes)
	}
}

// The message of a failed build is the line a model reads first. It was
// the build's directory and the installer's whole command line, "exit
// status 1" at its end, and the reason only in the output below it; it
// names the installer and carries the installer's own error now.
func TestEnvFailureMessageCarriesTheInstallersError(t *testing.T) {
	t.Parallel()
	be := &envcache.BuildError{
		Dir:  "/data/envcache/envs/env-0569d965a6bc3e0b",
		Args: []string{"/data/tools/uv/bin/uv", "pip", "install", "--no-config", "--python", "/data/envcache/envs/env-0569d965a6bc3e0b/bin/python", "--", "nosuchpkg-zz9"},
		Output: "Using Python 3.11.7 environment at: /data/envcache/envs/env-0569d965a6bc3e0b\n" +
			"error: No solution found when resolving dependencies\n" +
			"  cause: Because nosuchpkg-zz9 was not found in the package registry and you require nosuchpkg-zz9, we can conclude that your requirements are unsatisfiable.\n",
		Err: errors.New("exit status 1"),
	}
	res := (&Worker{}).envFailure(&wire.Job{ID: "01M8ZV7SBZG30MNP8NKQMJZ0Q9"}, 0, be)
	for _, want := range []string{"uv pip install", "exit status 1", "No solution found", "nosuchpkg-zz9 was not found in the package registry"} {
		if !strings.Contains(res.Message, want) {
			t.Errorf("message %q: want it to say %q", res.Message, want)
		}
	}
	if strings.Contains(res.Message, "--no-config") || strings.Contains(res.Message, "envcache/envs") || strings.Contains(res.Message, "\n") {
		t.Errorf("message %q: want one line, without the build's directory and the installer's flags", res.Message)
	}
	if res.Stderr != be.Output {
		t.Errorf("stderr %q: want the installer's output", res.Stderr)
	}
	if got := installerName([]string{"/env/bin/python", "-m", "pip", "install", "--find-links", "/w", "six"}); got != "python -m pip install" {
		t.Errorf("installer of python -m pip install ...: %q", got)
	}
}
