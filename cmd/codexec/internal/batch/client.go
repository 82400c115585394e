package batch

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// The batch tools of the frontend (submit_jobs, get_job_results,
// cancel_batch), called through an MCP client: over Streamable HTTP with
// the caller's token, or in process with an embedded single-node codexec.

// maxPerCall is how many jobs one submit_jobs or get_job_results call
// carries (the frontend's MaxBatchJobs).
const maxPerCall = 256

// maxCallCode is how many bytes of code the jobs of one submit_jobs call
// carry at most (the frontend's MaxBatchCallCode): each job is queued with a
// copy of its code, the batch's script included.
const maxCallCode = 64 << 20

// callTimeout bounds one call of a batch tool.
const callTimeout = 2 * time.Minute

// Embedded starts a single-node codexec in this process, keeping its state
// under dataDir, and returns an initialized client of its frontend and
// what stops it all. The cli package provides it.
type Embedded func(ctx context.Context, dataDir string) (c *client.Client, stop func(), err error)

// conn is a client of a frontend's batch tools.
type conn struct {
	c    *client.Client
	stop func()
}

// dialHTTP connects to the frontend at url with token (none when empty).
func dialHTTP(ctx context.Context, url, token string) (*conn, error) {
	var opts []transport.StreamableHTTPCOption
	if token != "" {
		opts = append(opts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	}
	c, err := client.NewStreamableHttpClient(url, opts...)
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", url, err)
	}
	if err := initialize(ctx, c); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("connect to %s: %w", url, err)
	}
	return &conn{c: c, stop: func() { _ = c.Close() }}, nil
}

// initialize performs the MCP handshake as the batch client.
func initialize(ctx context.Context, c *client.Client) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	req.Params.ClientInfo = mcp.Implementation{Name: "codexec-batch", Version: "1"}
	_, err := c.Initialize(ctx, req)
	return err
}

// Initialize is initialize, for the cli's embedded client.
func Initialize(ctx context.Context, c *client.Client) error { return initialize(ctx, c) }

// toolAnswer is the structured content of the batch tools.
type toolAnswer struct {
	Status  string      `json:"status"`
	Jobs    []jobAnswer `json:"jobs"`
	Message string      `json:"message"`
}

// jobAnswer is one job of a batch tool's answer.
type jobAnswer struct {
	Row     int64 `json:"row"`
	Attempt int64 `json:"attempt"`
	jobResult
}

// call calls tool and decodes its answer; a tool error is an error.
func (c *conn) call(ctx context.Context, tool string, args map[string]any) (*toolAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = tool, args
	res, err := c.c.CallTool(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	var out toolAnswer
	if res.StructuredContent != nil {
		raw, err := json.Marshal(res.StructuredContent)
		if err == nil {
			err = json.Unmarshal(raw, &out)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", tool, err)
		}
	}
	if res.IsError {
		msg := out.Message
		if msg == "" {
			msg = "failed"
		}
		return nil, fmt.Errorf("%s: %s: %s", tool, out.Status, msg)
	}
	return &out, nil
}

// pending is a job to submit: row r, attempt.
type pending struct {
	r       row
	attempt int64
}

// submit submits jobs (at most maxPerCall) of the batch spec.
func (c *conn) submit(ctx context.Context, spec Spec, script string, jobs []pending) ([]jobAnswer, error) {
	list := make([]map[string]any, len(jobs))
	for i, j := range jobs {
		m := map[string]any{"row": j.r.N, "attempt": j.attempt}
		if j.r.Code != "" {
			m["code"], m["filename"] = j.r.Code, j.r.File
		}
		if len(j.r.Params) > 0 {
			m["params"] = j.r.Params
		}
		list[i] = m
	}
	args := map[string]any{"batch_id": spec.ID, "jobs": list}
	if script != "" {
		args["code"] = script
	}
	if spec.Python != "" {
		args["python_version"] = spec.Python
	}
	if len(spec.Packages) > 0 {
		args["packages"] = spec.Packages
	}
	if spec.Timeout > 0 {
		args["timeout_seconds"] = spec.Timeout
	}
	if len(spec.Limits) > 0 {
		args["limits"] = spec.Limits
	}
	out, err := c.call(ctx, "submit_jobs", args)
	if err != nil {
		return nil, err
	}
	if len(out.Jobs) != len(jobs) {
		return nil, fmt.Errorf("submit_jobs answered for %d jobs of %d", len(out.Jobs), len(jobs))
	}
	return out.Jobs, nil
}

// results asks for the jobs ids (at most maxPerCall) of batch id.
func (c *conn) results(ctx context.Context, id string, ids []string) ([]jobAnswer, error) {
	out, err := c.call(ctx, "get_job_results", map[string]any{"batch_id": id, "job_ids": ids})
	if err != nil {
		return nil, err
	}
	if len(out.Jobs) != len(ids) {
		return nil, fmt.Errorf("get_job_results answered for %d jobs of %d", len(out.Jobs), len(ids))
	}
	return out.Jobs, nil
}

// cancel cancels batch id and stops its jobs ids (its unfinished ones) if
// they run.
func (c *conn) cancel(ctx context.Context, id string, ids []string) error {
	for first := true; first || len(ids) > 0; first = false {
		chunk := ids[:min(len(ids), maxPerCall)]
		ids = ids[len(chunk):]
		if _, err := c.call(ctx, "cancel_batch", map[string]any{"batch_id": id, "job_ids": chunk}); err != nil {
			return err
		}
	}
	return nil
}

// readFile reads length bytes from offset of the file rel of batch id's
// working directory (resources/read of its workspace URI with ?batch=),
// and the file's size.
func (c *conn) readFile(ctx context.Context, id, rel string, offset, length int64) ([]byte, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	q := url.Values{"batch": {id}, "offset": {strconv.FormatInt(offset, 10)}, "length": {strconv.FormatInt(length, 10)}}
	u := url.URL{Scheme: "codexec", Host: "workspace", Path: "/" + rel, RawQuery: q.Encode()}
	req := mcp.ReadResourceRequest{}
	req.Params.URI = u.String()
	res, err := c.c.ReadResource(ctx, req)
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", rel, err)
	}
	if len(res.Contents) != 1 {
		return nil, 0, fmt.Errorf("read %s: %d contents in the answer", rel, len(res.Contents))
	}
	var data []byte
	var meta map[string]any
	switch v := res.Contents[0].(type) {
	case mcp.TextResourceContents:
		data, meta = []byte(v.Text), v.Meta
	case mcp.BlobResourceContents:
		if data, err = base64.StdEncoding.DecodeString(v.Blob); err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", rel, err)
		}
		meta = v.Meta
	default:
		return nil, 0, fmt.Errorf("read %s: unexpected contents %T", rel, v)
	}
	var size int64
	raw, _ := json.Marshal(meta["size"])
	if err := json.Unmarshal(raw, &size); err != nil {
		return nil, 0, fmt.Errorf("read %s: the answer gives no size", rel)
	}
	return data, size, nil
}
