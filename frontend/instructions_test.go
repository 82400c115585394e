package frontend

import (
	"strings"
	"testing"
)

// The server's instructions, which a client puts before its model, name
// every tool a model calls: until 2026-12-05 they left out the five context
// tools, so a model that read them did not know that variables can stay
// between calls. The batch tools are codexec batch's, not a model's.
func TestInstructionsNameEveryTool(t *testing.T) {
	t.Parallel()
	f := newDevFrontend(t, Config{})
	batch := map[string]bool{"submit_jobs": true, "get_job_results": true, "cancel_batch": true}
	for name := range f.MCPServer(true).ListTools() {
		if !batch[name] && !strings.Contains(instructions, name) {
			t.Errorf("the server's instructions do not name the tool %s", name)
		}
	}
}
