package telemetry

import (
	"context"
	"testing"
)

// TestTracingOffRecordsNothing: without an endpoint the call's and the
// job's spans record nothing, the context is handed on as it came, and no
// trace context is made up for the job.
func TestTracingOffRecordsNothing(t *testing.T) {
	shutdown, err := StartTracing("", "dev")
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	ctx := context.Background()
	got, span := StartCall(ctx, "execute_code", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	if got != ctx || span.IsRecording() {
		t.Errorf("tracing off: StartCall changed the context (%v) or records (%v)", got != ctx, span.IsRecording())
	}
	if p, s := TraceContext(got); p != "" || s != "" {
		t.Errorf("tracing off: TraceContext = %q %q, want none", p, s)
	}
	if StartJob("execute", "", "", "j", "default", "w").IsRecording() {
		t.Error("tracing off: the job span records")
	}
}

// TestTracingEndpointChecked: an endpoint that is no http(s) URL with a
// host is refused at start, not discovered at the first export.
func TestTracingEndpointChecked(t *testing.T) {
	for _, bad := range []string{"collector:4318", "ftp://collector/v1/traces", "http:///v1/traces", "://x"} {
		if _, err := StartTracing(bad, "worker"); err == nil {
			t.Errorf("StartTracing(%q) accepted it", bad)
		}
	}
}
