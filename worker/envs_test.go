package worker

import (
	"slices"
	"strings"
	"testing"
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
