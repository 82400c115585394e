package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// A job's stdout and stderr are each cut at the output limit (1 MiB by
// default), but on stdio a result must fit one message (StdioMessageLimit),
// and there each stream is written twice (the text content and the
// structured content) and escaped as JSON, where a control character takes
// six bytes: two streams of 1 MiB can make a result of 24 MiB. fitStdio,
// the stdio transport's last resort, would then send no output at all.
// fitStdioResult cuts the streams of such a result first, keeping the
// start and the end of each with a line where the rest was, so that the
// result fits and its structured content keeps its schema.

// stdioRoom is what a stdio message holds besides its tool result: the
// JSON-RPC envelope, the request's id, the _meta of a task's result.
const stdioRoom = 64 << 10

// stdioMessageLimit is the largest message ServeStdio writes.
func (f *Frontend) stdioMessageLimit() int {
	if f.stdioLimit > 0 {
		return f.stdioLimit
	}
	return StdioMessageLimit
}

// fitStdioResults is the stdio server's tool middleware that cuts a job
// result too large for one message (fitStdioResult).
func (f *Frontend) fitStdioResults(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := next(ctx, req)
		if res != nil {
			res = fitStdioResult(res, f.stdioMessageLimit())
		}
		return res, err
	}
}

// fitStdioResult returns res, or, when res is a job result (ExecResult)
// whose streams make it larger than one stdio message of limit bytes, the
// same result with each stream cut to its start and its end around a line
// that says how many bytes were left out and how to get them all, and
// stdout_truncated or stderr_truncated set. Pictures do not count: a
// result that fits without them is left whole, and fitStdio leaves them
// out of one that does not.
func fitStdioResult(res *mcp.CallToolResult, limit int) *mcp.CallToolResult {
	er, ok := res.StructuredContent.(ExecResult)
	if !ok || len(res.Content) == 0 {
		return res
	}
	if _, ok := res.Content[0].(mcp.TextContent); !ok {
		return res
	}
	budget := limit - stdioRoom
	// Each byte of a stream takes at most six bytes as JSON, and is written
	// twice.
	if 12*(len(er.Stdout)+len(er.Stderr)) < budget/2 {
		return res
	}
	size := func(er ExecResult, stdoutShown, stderrShown int) int {
		c := *res
		c.StructuredContent = er
		c.Content = []mcp.Content{mcp.NewTextContent(execText(er, stdoutShown, stderrShown))}
		for _, x := range res.Content[1:] {
			switch x.(type) {
			case mcp.ImageContent, mcp.AudioContent:
			default:
				c.Content = append(c.Content, x)
			}
		}
		b, _ := json.Marshal(&c)
		return len(b)
	}
	whole := size(er, len(er.Stdout), len(er.Stderr))
	if whole <= budget {
		return res
	}
	bare := er
	bare.Stdout, bare.Stderr = "", ""
	// Room for the streams, written twice, and the lines where they are
	// cut (each under 1 KiB, also twice).
	room := (budget-size(bare, 0, 0))/2 - 2<<10
	for range 4 {
		if room <= 0 {
			break
		}
		out, outShown, outCut := cutStream(er.Stdout, "stdout", er.StdoutFile, limit, 0)
		errOut, errShown, errCut := cutStream(er.Stderr, "stderr", er.StderrFile, limit, 0)
		outLen, errLen := jsonLen(er.Stdout), jsonLen(er.Stderr)
		outRoom, errRoom := splitRoom(outLen, errLen, room)
		if outLen > outRoom {
			out, outShown, outCut = cutStream(er.Stdout, "stdout", er.StdoutFile, limit, outRoom)
		}
		if errLen > errRoom {
			errOut, errShown, errCut = cutStream(er.Stderr, "stderr", er.StderrFile, limit, errRoom)
		}
		cut := er
		cut.Stdout, cut.Stderr = out, errOut
		cut.StdoutTruncated = er.StdoutTruncated || outCut
		cut.StderrTruncated = er.StderrTruncated || errCut
		if n := size(cut, outShown, errShown); n > budget {
			room -= (n-budget)/2 + 1<<10
			continue
		}
		fit := *res
		fit.StructuredContent = cut
		fit.Content = append([]mcp.Content{mcp.NewTextContent(execText(cut, outShown, errShown))}, res.Content[1:]...)
		return &fit
	}
	return res // fitStdio answers for it
}

// cutStream is stream s of a job (named name; file is the file of the
// working directory that holds all of it, if any) within room bytes as
// JSON, for a stdio message of limit bytes: s itself when it fits (room 0: always), or else its start and its
// end, on whole characters and where they can on whole lines, around a
// line that says how many bytes were left out and how to read them all.
// shown is how many bytes of s it keeps; cut whether it left any out.
func cutStream(s, name, file string, limit, room int) (out string, shown int, cut bool) {
	if room == 0 || jsonLen(s) <= room {
		return s, len(s), false
	}
	half := room / 2
	head := jsonTextFit(s, half+2)
	if nl := strings.LastIndexByte(s[:head], '\n'); nl >= 0 && head-nl <= 1<<10 {
		head = nl + 1
	}
	// The tail: the latest start from which the rest fits in half.
	lo, hi := head, len(s)
	for lo < hi {
		mid := (lo + hi) / 2
		if jsonTextFit(s[mid:], half+2) == len(s)-mid {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	tail := lo
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	if nl := strings.IndexByte(s[tail:], '\n'); nl >= 0 && nl < 1<<10 && tail+nl+1 < len(s) {
		tail += nl + 1
	}
	how := "to get all of it, have the code write its output to a file in the working directory and read that in pieces " +
		"with resources/read of codexec://workspace/<path>?offset=N&length=M"
	if file != "" {
		how = fmt.Sprintf("all of it is in %s of the working directory: read it in pieces with resources/read of codexec://workspace/%s?offset=N&length=M", file, file)
	}
	sep := ""
	if head > 0 && s[head-1] != '\n' {
		sep = "\n"
	}
	return fmt.Sprintf("%s%s[... %d bytes of %s left out here: the job's output is too large for one stdio message (%s as JSON, where a control character takes 6 bytes); %s ...]\n%s",
		s[:head], sep, tail-head, name, formatSize(int64(limit)), how, s[tail:]), head + len(s) - tail, true
}

// fitBatchOutputs cuts the outputs of jobs, get_job_results' answer on
// stdio, so that together they fit one message of limit bytes: up to 256
// jobs of a batch, each with up to the output limit per stream, passed it
// by far, and the whole answer was replaced by fitStdio's error, every
// job's output lost. The room is shared out smallest first: a job whose
// output needs less than an equal share of what is left keeps all of it,
// the others get equal shares, each stream cut to its start and its end
// around a line that says so (cutStream), and the job's message says that
// its output was cut.
func fitBatchOutputs(jobs []BatchJobResult, limit int) {
	need := make([]int, len(jobs))
	total := 0
	for i, j := range jobs {
		need[i] = jsonLen(j.Stdout) + jsonLen(j.Stderr)
		total += need[i]
	}
	// Besides the outputs: each job's other fields, and the envelope.
	room := limit - stdioRoom - len(jobs)*(1<<10)
	if total <= room {
		return
	}
	order := make([]int, 0, len(jobs))
	for i := range jobs {
		if need[i] > 0 {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return need[a] - need[b] })
	for k, i := range order {
		share := max(room, 0) / (len(order) - k)
		if need[i] <= share {
			room -= need[i]
			continue
		}
		room -= share
		// Room for the two lines where the streams are cut.
		share = max(share-2<<10, 0)
		j := &jobs[i]
		outLen, errLen := jsonLen(j.Stdout), jsonLen(j.Stderr)
		outRoom, errRoom := splitRoom(outLen, errLen, share)
		var cutOut, cutErr bool
		if outLen > outRoom {
			j.Stdout, _, cutOut = cutStream(j.Stdout, "stdout", "", limit, max(outRoom, 1))
		}
		if errLen > errRoom {
			j.Stderr, _, cutErr = cutStream(j.Stderr, "stderr", "", limit, max(errRoom, 1))
		}
		if cutOut || cutErr {
			note := "output cut to its start and end: the jobs asked for, together, pass what one stdio message carries; ask for fewer jobs at a time to get more of each"
			if j.Message != "" {
				note = j.Message + "; " + note
			}
			j.Message = note
		}
	}
}

// splitRoom shares room between a job's two streams, of outLen and errLen
// bytes as JSON: a stream that needs less than half keeps all of itself,
// the other takes the rest.
func splitRoom(outLen, errLen, room int) (outRoom, errRoom int) {
	outRoom, errRoom = room/2, room-room/2
	switch {
	case outLen <= outRoom:
		errRoom = room - outLen
	case errLen <= errRoom:
		outRoom = room - errLen
	}
	return outRoom, errRoom
}
