package worker

import (
	"slices"
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
