package main

import (
	"bytes"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
)

// otlpReceiver is an OTLP/HTTP traces endpoint in the test process: it
// decodes each export request (protobuf) and keeps its spans with their
// resource's attributes.
type otlpReceiver struct {
	url      string
	mu       sync.Mutex
	requests int
	spans    []receivedSpan
}

type receivedSpan struct {
	*tracepb.Span
	resource map[string]string
}

func startOTLPReceiver(t testing.TB) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var export coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &export)
		}
		if err != nil || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("OTLP receiver: %s %s %q: %v", req.Method, req.URL.Path, req.Header.Get("Content-Type"), err)
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		r.keep(&export)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL + "/v1/traces"
	return r
}

func (r *otlpReceiver) keep(export *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	for _, rs := range export.ResourceSpans {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, receivedSpan{s, res})
			}
		}
	}
}

func (r *otlpReceiver) received() (requests int, spans []receivedSpan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests, append([]receivedSpan(nil), r.spans...)
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.Key] = kv.GetValue().GetStringValue()
	}
	return m
}

// TestDevExportsTraceSpans runs `codexec dev --otel-endpoint` against an
// OTLP/HTTP receiver in the test, with the SDK's batch delay set past the
// test's length: one execute_code call with a traceparent in its _meta
// yields, once the process stops (the flush on a graceful stop), the
// frontend's span of the call, child of the given parent, and the worker's
// span of the job, child of the call's, both in the caller's trace, with
// the job's id and status and not its code. Without the flag, nothing is
// sent, even with OTEL_EXPORTER_OTLP_ENDPOINT set.
func TestDevExportsTraceSpans(t *testing.T) {
	t.Parallel()
	recv := startOTLPReceiver(t)
	env := codexecEnv("CODEXEC_DATA_DIR="+t.TempDir(), "CODEXEC_VENV="+venvFor(t),
		"CODEXEC_OTEL_ENDPOINT="+recv.url, "OTEL_BSP_SCHEDULE_DELAY=600000")
	c, p := stdio(t, e2e.Command{Name: "codexec dev", Path: os.Args[0], Args: []string{"dev"}, Env: env}, nil)
	const code = "print('traced ' + 'secret-code-marker')"
	jobID := callTraced(t, c, code)
	p.Stop(stopGrace)

	wantTrace, wantParent := traceparent[3:35], traceparent[36:52]
	_, spans := recv.received()
	var call, job *receivedSpan
	for i, s := range spans {
		if hex.EncodeToString(s.TraceId) != wantTrace {
			continue
		}
		switch s.Name {
		case "tools/call execute_code":
			call = &spans[i]
		case "job execute":
			job = &spans[i]
		}
	}
	if call == nil || job == nil {
		t.Fatalf("spans in trace %s: call %v, job %v; all received: %v", wantTrace, call != nil, job != nil, spans)
	}
	if got := hex.EncodeToString(call.ParentSpanId); got != wantParent {
		t.Errorf("call span's parent = %s, want the request's %s", got, wantParent)
	}
	if !bytes.Equal(job.ParentSpanId, call.SpanId) {
		t.Errorf("job span's parent = %x, want the call span %x", job.ParentSpanId, call.SpanId)
	}
	if call.resource["service.name"] != "codexec" || call.resource["codexec.role"] != "dev" {
		t.Errorf("resource = %v, want service.name codexec, codexec.role dev", call.resource)
	}
	a := attrs(job.Attributes)
	if a["codexec.job.id"] != jobID || a["codexec.job.status"] != "ok" || a["codexec.pool"] == "" || a["codexec.worker.id"] == "" {
		t.Errorf("job span attributes = %v, want job id %s, status ok, pool, worker id", a, jobID)
	}
	for _, s := range spans {
		for k, v := range attrs(s.Attributes) {
			if strings.Contains(v, "secret-code-marker") {
				t.Errorf("span %s carries the job's code in %s", s.Name, k)
			}
		}
	}

	off := startOTLPReceiver(t)
	env = codexecEnv("CODEXEC_DATA_DIR="+t.TempDir(), "CODEXEC_VENV="+venvFor(t),
		"OTEL_EXPORTER_OTLP_ENDPOINT="+strings.TrimSuffix(off.url, "/v1/traces"), "OTEL_BSP_SCHEDULE_DELAY=0")
	c, p = stdio(t, e2e.Command{Name: "codexec dev", Path: os.Args[0], Args: []string{"dev"}, Env: env}, nil)
	callTraced(t, c, code)
	p.Stop(stopGrace)
	if n, _ := off.received(); n != 0 {
		t.Errorf("tracing off: the receiver got %d export requests, want none", n)
	}
}
