package frontend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/mark3labs/mcp-go/mcp"
)

// StdioMessageLimit is the largest message codexec writes on stdio. The
// official TypeScript SDK's stdio client, and every client built on it (the
// MCP Inspector, ...), keeps at most 10 MiB of input it has not parsed yet
// and closes the connection when a message passes that: the server is then
// gone for the client, with no word of why. A message just under 10 MiB
// passes or not depending on how the pipe splits it, so the limit leaves
// room. Streamable HTTP has no such limit.
const StdioMessageLimit = 8 << 20

// fitStdio returns msg (one JSON-RPC message and its newline) when it is
// within limit, or else a message within it that says why the real one is
// not sent:
//
//   - a tool result (also a task's, from tasks/result) first loses its
//     pictures, which a line of text then names, and the structured
//     content's images count and picture_notes say so too;
//   - one still too large becomes a result with isError that says how
//     large it was and names the job, if one ran; it has no structured
//     content, which an error result may lack (a client checks the
//     structured content of a result against the tool's output schema);
//   - any other response becomes a JSON-RPC error;
//   - a notification is dropped.
func fitStdio(msg []byte, limit int, log *slog.Logger) []byte {
	if len(msg) <= limit {
		return msg
	}
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id,omitempty"`
		Method  string          `json:"method,omitempty"`
		Result  json.RawMessage `json:"result,omitempty"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(msg), &m); err != nil || len(m.ID) == 0 || m.Method != "" {
		log.Warn("stdio: a message larger than a client reads is dropped", "bytes", len(msg), "limit", limit, "method", m.Method)
		return nil
	}
	size := fmt.Sprintf("%.1f MiB", float64(len(msg))/(1<<20))
	max := fmt.Sprintf("%.0f MiB", float64(limit)/(1<<20))
	log.Warn("stdio: a response larger than a client reads is cut down", "bytes", len(msg), "limit", limit)
	encode := func(result any) []byte {
		out, _ := json.Marshal(struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Result  any             `json:"result"`
		}{mcp.JSONRPC_VERSION, m.ID, result})
		return append(out, '\n')
	}
	var res map[string]json.RawMessage
	var content []json.RawMessage
	if json.Unmarshal(m.Result, &res) == nil && res["content"] != nil && json.Unmarshal(res["content"], &content) == nil {
		// A tool result: leave out its pictures.
		kept, dropped := content[:0:0], 0
		for _, c := range content {
			var kind struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(c, &kind) == nil && (kind.Type == "image" || kind.Type == "audio") {
				dropped++
				continue
			}
			kept = append(kept, c)
		}
		if dropped > 0 {
			why := fmt.Sprintf("%d picture(s) left out: with them the result is %s, more than the %s one message may carry on stdio", dropped, size, max)
			note, _ := json.Marshal(mcp.NewTextContent("[pictures: " + why + "]"))
			res["content"], _ = json.Marshal(append(kept, note))
			var sc map[string]any
			if json.Unmarshal(res["structuredContent"], &sc) == nil && sc != nil {
				if _, ok := sc["images"]; ok {
					delete(sc, "images")
					if prev, _ := sc["picture_notes"].(string); prev != "" {
						why = prev + "; " + why
					}
					sc["picture_notes"] = why
					res["structuredContent"], _ = json.Marshal(sc)
				}
			}
			if out := encode(res); len(out) <= limit {
				return out
			}
		}
		var job struct {
			JobID string `json:"job_id"`
		}
		_ = json.Unmarshal(res["structuredContent"], &job)
		text := fmt.Sprintf("[internal: this result is %s, more than the %s one message may carry on stdio (a client would drop the connection), so it is not sent", size, max)
		if job.JobID != "" {
			text += fmt.Sprintf("; the job ran: job %s. Ask for less output, or have the code write it to a file and read that in pieces with resources/read (codexec://workspace/<path>?offset=N&length=M)", job.JobID)
		} else {
			text += "; ask for less (a smaller piece, fewer items)"
		}
		small := map[string]any{"content": []mcp.Content{mcp.NewTextContent(text + "]")}, "isError": true}
		if meta, ok := res["_meta"]; ok {
			small["_meta"] = meta
		}
		return encode(small)
	}
	out, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   rpcError        `json:"error"`
	}{mcp.JSONRPC_VERSION, m.ID, rpcError{Code: mcp.INTERNAL_ERROR, Message: fmt.Sprintf(
		"the response is %s, more than the %s one message may carry on stdio, so it is not sent: ask for less (resources/read takes ?offset=N&length=M)", size, max)}})
	return append(out, '\n')
}
