package frontend

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
)

// submit_jobs refuses bad input with a sentence and queues nothing; a row
// submitted twice gets the same job id and is queued once; get_job_results
// says running for a queued job and unknown for an id of another batch.
func TestBatchTools(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	const id = "test-batch-0123456789"
	for name, tc := range map[string]struct {
		args map[string]any
		want string
	}{
		"short id":      {map[string]any{"batch_id": "short", "code": "print(1)", "jobs": []any{map[string]any{"row": 0}}}, "16 to 64"},
		"no jobs":       {map[string]any{"batch_id": id, "code": "print(1)", "jobs": []any{}}, "non-empty array"},
		"too many":      {map[string]any{"batch_id": id, "code": "print(1)", "jobs": make([]any, MaxBatchJobs+1)}, "the limit is 256"},
		"no row":        {map[string]any{"batch_id": id, "code": "print(1)", "jobs": []any{map[string]any{"attempt": 0}}}, "row"},
		"params array":  {map[string]any{"batch_id": id, "code": "print(1)", "jobs": []any{map[string]any{"row": 0, "params": []any{1}}}}, "params"},
		"bad package":   {map[string]any{"batch_id": id, "code": "print(1)", "packages": []any{"--index-url=x"}, "jobs": []any{map[string]any{"row": 0}}}, ""},
		"long timeout":  {map[string]any{"batch_id": id, "code": "print(1)", "timeout_seconds": 1e9, "jobs": []any{map[string]any{"row": 0}}}, "timeout_seconds"},
		"bad limit key": {map[string]any{"batch_id": id, "code": "print(1)", "limits": map[string]any{"nope": 1}, "jobs": []any{map[string]any{"row": 0}}}, "nope"},
	} {
		res, br := callTool[BatchResult](t, jb.c, "submit_jobs", tc.args)
		if !res.IsError || br.Status != "rejected" || !strings.Contains(br.Message, tc.want) {
			t.Errorf("%s: isError=%v %+v, want rejected saying %q", name, res.IsError, br, tc.want)
		}
	}

	args := map[string]any{"batch_id": id, "code": "print(1)", "jobs": []any{
		map[string]any{"row": 0, "params": map[string]any{"x": 1}}, map[string]any{"row": 1, "code": "   "},
		map[string]any{"row": 3, "attempt": 2}}}
	_, first := callTool[BatchResult](t, jb.c, "submit_jobs", args)
	if len(first.Jobs) != 3 || first.Jobs[0].Status != "queued" || first.Jobs[1].Status != "rejected" || first.Jobs[2].Status != "queued" {
		t.Fatalf("first submission: %+v", first)
	}
	_, again := callTool[BatchResult](t, jb.c, "submit_jobs", args)
	if again.Jobs[0].Status != "submitted_before" || again.Jobs[0].JobID != first.Jobs[0].JobID {
		t.Errorf("the same row again: %+v, want submitted_before under id %s", again.Jobs[0], first.Jobs[0].JobID)
	}
	_, got := callTool[BatchResult](t, jb.c, "get_job_results", map[string]any{"batch_id": id, "job_ids": []any{first.Jobs[0].JobID, first.Jobs[2].JobID}})
	if len(got.Jobs) != 2 || got.Jobs[0].Status != "running" || got.Jobs[1].Status != "running" {
		t.Errorf("queued jobs: %+v, want running", got)
	} else if g := got.Jobs[1]; g.Row != 3 || g.Attempt != 2 {
		t.Errorf("a queued job of row 3, attempt 2, answered as row %d, attempt %d", g.Row, g.Attempt)
	}
	_, other := callTool[BatchResult](t, jb.c, "get_job_results", map[string]any{"batch_id": id + "x", "job_ids": []any{first.Jobs[0].JobID}})
	if len(other.Jobs) != 1 || other.Jobs[0].Status != "unknown" {
		t.Errorf("the job asked of another batch: %+v, want unknown", other)
	}
	many := make([]any, MaxBatchJobs)
	for i := range many {
		many[i] = first.Jobs[0].JobID
	}
	if res, all := callTool[BatchResult](t, jb.c, "get_job_results", map[string]any{"batch_id": id, "job_ids": many}); res.IsError || len(all.Jobs) != MaxBatchJobs {
		t.Errorf("%d ids in one call: isError=%v %s", MaxBatchJobs, res.IsError, all.Message)
	}

	// cancel_batch stops the jobs named that are the batch's, and no other.
	foreign := putRecord(t, jb.b, "local", time.Now().Add(time.Minute))
	if res, br := callTool[BatchResult](t, jb.c, "cancel_batch", map[string]any{"batch_id": id, "job_ids": []any{first.Jobs[0].JobID, foreign}}); res.IsError {
		t.Fatalf("cancel_batch: %+v", br)
	}
	for jid, want := range map[string]bool{first.Jobs[0].JobID: true, foreign: false} {
		if got, err := jb.b.JobCancelled(t.Context(), jid); err != nil || got != want {
			t.Errorf("job %s cancelled: %v %v, want %v", jid, got, err, want)
		}
	}
}

// One submit_jobs call queues at most MaxBatchCallCode bytes of code: each
// job is queued with its own copy of the call's shared code, so 33 rows of
// a 2 MiB script queue 32 jobs (64 MiB), and the last is answered internal,
// to be sent again, instead of 66 MiB stored for one 2 MiB request.
func TestBatchCallCodeBounded(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	script := "print(1)\n#" + strings.Repeat("x", 2<<20-11) + "\n" // 2 MiB
	rows := make([]any, 33)
	for i := range rows {
		rows[i] = map[string]any{"row": i}
	}
	res, br := callTool[BatchResult](t, jb.c, "submit_jobs", map[string]any{"batch_id": "bounded-batch-0001", "code": script, "jobs": rows})
	if res.IsError || len(br.Jobs) != len(rows) {
		t.Fatalf("submit_jobs: %s", textOf(res))
	}
	queued := 0
	for _, j := range br.Jobs {
		if j.Status == "queued" {
			queued++
		}
	}
	last := br.Jobs[len(rows)-1]
	if queued != MaxBatchCallCode/len(script) || last.Status != "internal" || !strings.Contains(last.Message, "submit it again in another call") {
		t.Fatalf("%d of %d jobs of %d bytes queued, the last %s %q; want %d queued", queued, len(rows), len(script), last.Status, last.Message, MaxBatchCallCode/len(script))
	}
}

// One get_job_results answer carries at most MaxBatchResultBytes of output
// (on stdio, what one message holds): a job's streams are cut at 1 MiB
// each, but a call naming 256 such jobs, or one job 256 times, made an
// answer of gigabytes once escaped as JSON. The first job is answered
// whole; those past the budget are answered running, and asking again gets
// them.
func TestBatchResultsBounded(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	const id = "bounded-results-0001"
	ctl := strings.Repeat("\x01", 512<<10) // six bytes each as JSON: 3 MiB
	jobs := make([]string, 8)
	for i := range jobs {
		jobs[i] = batchJobID(batchScope(t.Context(), true, id), int64(i), 0)
		if _, err := jb.b.PutResult(t.Context(), &wire.Result{JobID: jobs[i], Scope: batchScope(t.Context(), true, id), Status: wire.StatusOK,
			Stdout: ctl, Stderr: "e", BatchRow: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	ids := []any{}
	for range 4 {
		for _, j := range jobs {
			ids = append(ids, j)
		}
	}
	res, br := callTool[BatchResult](t, jb.c, "get_job_results", map[string]any{"batch_id": id, "job_ids": ids})
	raw, _ := json.Marshal(res.StructuredContent)
	if res.IsError || len(br.Jobs) != len(ids) {
		t.Fatalf("get_job_results: %s", textOf(res))
	}
	if len(raw) > StdioMessageLimit {
		t.Errorf("an answer of %d bytes, more than one stdio message (%d)", len(raw), StdioMessageLimit)
	}
	whole, later := 0, ""
	for _, j := range br.Jobs {
		switch {
		case j.Status == "ok" && len(j.Stdout) == len(ctl):
			whole++
		case j.Status == "running" && strings.Contains(j.Message, "ask for it again"):
			later = j.JobID
		default:
			t.Errorf("job %s: %s %q (%d bytes of stdout)", j.JobID, j.Status, j.Message, len(j.Stdout))
		}
	}
	if whole == 0 || later == "" {
		t.Fatalf("%d jobs answered whole, none answered to ask again (%q): want both", whole, later)
	}
	if _, again := callTool[BatchResult](t, jb.c, "get_job_results", map[string]any{"batch_id": id, "job_ids": []any{later}}); again.Jobs[0].Status != "ok" || len(again.Jobs[0].Stdout) != len(ctl) {
		t.Errorf("a job asked for again: %s %q", again.Jobs[0].Status, again.Jobs[0].Message)
	}
}

// The jobs asked for first are the ones an answer carries whole, whatever
// order their reads end in: a first job larger than the others, read
// last, was answered "ask for it again" beside the smaller ones after it,
// and a client asking for its jobs in order saw it skipped.
func TestBatchResultsAnsweredInTheOrderAsked(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	const id = "ordered-results-0001"
	scope := batchScope(t.Context(), true, id)
	ids := []any{}
	for i := range 4 {
		size := 1 << 20 // 6 MiB as JSON
		if i == 0 {
			size = 2 << 20 // 12 MiB as JSON: with any other, past what one answer carries
		}
		jid := batchJobID(scope, int64(i), 0)
		if _, err := jb.b.PutResult(t.Context(), &wire.Result{JobID: jid, Scope: scope, Status: wire.StatusOK,
			Stdout: strings.Repeat("\x01", size), BatchRow: int64(i)}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, jid)
	}
	for try := range 5 {
		res, br := callTool[BatchResult](t, jb.c, "get_job_results", map[string]any{"batch_id": id, "job_ids": ids})
		if res.IsError || len(br.Jobs) != len(ids) {
			t.Fatalf("get_job_results: %s", textOf(res))
		}
		for i, j := range br.Jobs {
			if whole := j.Status == "ok"; whole != (i == 0) || (!whole && !strings.Contains(j.Message, "ask for it again")) {
				t.Errorf("try %d, job %d of 4: %s %q (%d bytes of stdout); want only the first answered whole", try, i, j.Status, j.Message, len(j.Stdout))
			}
		}
	}
}

// A job named many times in one get_job_results call is read once: 256
// copies of one id were 256 reads of its result, 28 s of the frontend's
// CPU for a result of 1 MiB per stream. Counted here as the requests the
// frontend's connection sends for the call.
func TestBatchResultsReadEachJobOnce(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	const id = "read-once-batch-0001"
	scope := batchScope(t.Context(), true, id)
	jid := batchJobID(scope, 0, 0)
	if _, err := jb.b.PutResult(t.Context(), &wire.Result{JobID: jid, Scope: scope, Status: wire.StatusOK, Stdout: "once\n"}); err != nil {
		t.Fatal(err)
	}
	ids := make([]any, 128)
	for i := range ids {
		ids[i] = jid
	}
	before := jb.b.Conn().Stats().OutMsgs
	res, br := callTool[BatchResult](t, jb.c, "get_job_results", map[string]any{"batch_id": id, "job_ids": ids})
	sent := jb.b.Conn().Stats().OutMsgs - before
	if res.IsError || len(br.Jobs) != len(ids) {
		t.Fatalf("get_job_results: %s", textOf(res))
	}
	for _, j := range br.Jobs {
		if j.Status != "ok" || j.Stdout != "once\n" {
			t.Fatalf("a copy answered %s %q", j.Status, j.Stdout)
		}
	}
	if sent > 16 {
		t.Errorf("128 copies of one job id took %d messages of the frontend's connection: read more than once", sent)
	}
}

// cancel_batch marks only a batch that something was submitted to: the
// mark is kept as long as results, and a caller naming a new batch id in
// each call left a key per call in the results bucket that no quota
// counted.
func TestBatchCancelOfNoBatchWritesNothing(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	const never, used = "never-submitted-0001", "was-submitted-00001"
	res, br := callTool[BatchResult](t, jb.c, "cancel_batch", map[string]any{"batch_id": never})
	if res.IsError || !strings.Contains(br.Message, "nothing to cancel") {
		t.Errorf("cancel_batch of a batch never submitted to: isError=%v %q", res.IsError, br.Message)
	}
	if got, err := jb.b.BatchCancelled(t.Context(), batchScope(t.Context(), true, never)); err != nil || got {
		t.Errorf("a batch never submitted to marked cancelled: %v %v", got, err)
	}
	if _, br := callTool[BatchResult](t, jb.c, "submit_jobs", map[string]any{"batch_id": used, "code": "print(1)", "jobs": []any{map[string]any{"row": 0}}}); br.Jobs[0].Status != "queued" {
		t.Fatalf("submit_jobs: %+v", br)
	}
	if res, br := callTool[BatchResult](t, jb.c, "cancel_batch", map[string]any{"batch_id": used}); res.IsError {
		t.Fatalf("cancel_batch: %q", br.Message)
	}
	if got, err := jb.b.BatchCancelled(t.Context(), batchScope(t.Context(), true, used)); err != nil || !got {
		t.Errorf("a batch submitted to, cancelled: marked %v %v, want true", got, err)
	}
}

// get_job_results reads at most maxBatchReads results at once on a
// frontend, all calls together, and none once its answer is full: reading
// 16 results of 2 MiB at once, one call's bound then, had the frontend's
// NATS connection dropped (its reads timed out), failing every tenant's
// calls in flight, once per call.
func TestBatchResultReadsBounded(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	const id = "bounded-reads-000001"
	scope := batchScope(t.Context(), true, id)
	ctl := strings.Repeat("\x01", 1<<20) // 6 MiB as JSON
	ids := []any{}
	for i := range 12 {
		jid := batchJobID(scope, int64(i), 0)
		if _, err := jb.b.PutResult(t.Context(), &wire.Result{JobID: jid, Scope: scope, Status: wire.StatusOK, Stdout: ctl, BatchRow: int64(i)}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, jid)
	}
	// Every read slot of the frontend taken: the call waits.
	for range maxBatchReads {
		jb.f.batchReads <- struct{}{}
	}
	done := make(chan BatchResult, 1)
	go func() {
		_, br := callTool[BatchResult](t, jb.c, "get_job_results", map[string]any{"batch_id": id, "job_ids": ids})
		done <- br
	}()
	select {
	case <-done:
		t.Fatal("get_job_results read results with every read slot of the frontend taken")
	case <-time.After(300 * time.Millisecond):
	}
	for range maxBatchReads {
		<-jb.f.batchReads
	}
	br := <-done
	read, skipped := 0, 0
	for _, j := range br.Jobs {
		switch {
		case j.Status == "ok":
			read++
		case j.Status == "running" && strings.Contains(j.Message, "not read: this answer is full"):
			skipped++
		}
	}
	if read == 0 || skipped < len(ids)-maxBatchReads-read {
		t.Errorf("%d of %d jobs answered, %d not read once the answer was full: want at least %d not read", read, len(ids), skipped, len(ids)-maxBatchReads-read)
	}
}

// A job of submit_jobs is an object of row, attempt, code, filename and
// params. A key it does not take (a timeout of its own, code under
// another name) was ignored, and the job queued with the defaults it
// meant to change, or with the call's shared code instead of its own; the
// tools refuse an unknown argument for that reason, and submit_jobs now
// refuses an unknown key of a job the same way, naming the keys it takes.
func TestBatchJobsRefuseUnknownKeys(t *testing.T) {
	for _, tc := range []struct {
		job  map[string]any
		want string
	}{
		{map[string]any{"row": 0, "code": "print(1)", "timeout_seconds": 5}, `"timeout_seconds"`},
		{map[string]any{"row": 1, "script": "print(1)"}, `"script"`},
	} {
		_, err := batchRows(map[string]any{"jobs": []any{map[string]any{"row": 0}, tc.job}})
		if err == nil {
			t.Errorf("job %v: accepted, want refused naming %s", tc.job, tc.want)
			continue
		}
		msg := err.Error()
		for _, want := range []string{"job 1 of 'jobs'", tc.want, "row, attempt, code, filename, params"} {
			if !strings.Contains(msg, want) {
				t.Errorf("job %v: %q, want it to say %s", tc.job, msg, want)
			}
		}
	}
	if _, err := batchRows(map[string]any{"jobs": []any{map[string]any{"row": 0, "attempt": 1, "code": "x", "filename": "a.py", "params": map[string]any{"a": 1}}}}); err != nil {
		t.Errorf("a job of every key it takes: %v", err)
	}
}

// The text of a batch tool's answer is what a model reads at a glance. It
// said "[ok: 2 jobs]" whatever became of the jobs, so a call whose jobs
// were all refused read as a success; it counts them by status now.
func TestBatchTextCountsEachStatus(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	res, br := callTool[BatchResult](t, jb.c, "submit_jobs", map[string]any{"batch_id": "test-batch-text-0123456789", "jobs": []any{
		map[string]any{"row": 0, "code": "print(1)"}, map[string]any{"row": 1}, map[string]any{"row": 2}}})
	if res.IsError || len(br.Jobs) != 3 {
		t.Fatalf("submit_jobs: isError=%v %+v", res.IsError, br)
	}
	text := res.Content[0].(mcp.TextContent).Text
	if !strings.Contains(text, "3 jobs: 1 queued, 2 rejected") {
		t.Errorf("text %q, want it to count the jobs by status: 3 jobs: 1 queued, 2 rejected", text)
	}
}
