package wire

import (
	"strings"
	"testing"
)

func TestValidTraceParent(t *testing.T) {
	good := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if !ValidTraceParent(good) || TraceID(good) != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("%q refused, or its trace id misread (%q)", good, TraceID(good))
	}
	for _, bad := range []string{
		"", "00", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
		"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\n",
	} {
		if ValidTraceParent(bad) || TraceID(bad) != "" {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestValidTraceState(t *testing.T) {
	if !ValidTraceState("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7") || !ValidTraceState("") {
		t.Fatal("a valid tracestate refused")
	}
	for _, bad := range []string{"a=b\nc=d", strings.Repeat("a", 513), "k=\x00"} {
		if ValidTraceState(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}
