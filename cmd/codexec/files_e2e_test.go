package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/codexec/codexec/frontend"
)

// readResource reads uri through resources/read: its bytes, the file's
// size (_meta.size), or the error.
func readResource(t *testing.T, c *client.Client, uri string) ([]byte, int64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := mcp.ReadResourceRequest{}
	req.Params.URI = uri
	res, err := c.ReadResource(ctx, req)
	if err != nil {
		return nil, 0, err
	}
	if len(res.Contents) != 1 {
		t.Fatalf("%s: %d contents", uri, len(res.Contents))
	}
	var meta map[string]any
	var data []byte
	switch c := res.Contents[0].(type) {
	case mcp.TextResourceContents:
		data, meta = []byte(c.Text), c.Meta
	case mcp.BlobResourceContents:
		if data, err = base64.StdEncoding.DecodeString(c.Blob); err != nil {
			t.Fatal(err)
		}
		meta = c.Meta
	default:
		t.Fatalf("%s: contents %T", uri, c)
	}
	size, _ := meta["size"].(float64)
	return data, int64(size), nil
}

// readResourceError is the JSON-RPC error of resources/read of uri, nil
// when the read succeeds.
func readResourceError(t *testing.T, c *client.Client, uri string) *mcp.JSONRPCErrorDetails {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := c.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(int64(1 << 40)),
		Method: string(mcp.MethodResourcesRead), Params: map[string]any{"uri": uri}})
	if err != nil {
		t.Fatalf("resources/read %s: %v", uri, err)
	}
	return resp.Error
}

// readWhole reads uri in pieces of 4 MiB until _meta.size.
func readWhole(t *testing.T, c *client.Client, uri string) []byte {
	t.Helper()
	var all []byte
	for {
		piece, size, err := readResource(t, c, fmt.Sprintf("%s?offset=%d", uri, len(all)))
		if err != nil {
			t.Fatalf("%s at %d: %v", uri, len(all), err)
		}
		all = append(all, piece...)
		if int64(len(all)) >= size || len(piece) == 0 {
			return all
		}
	}
}

func resourceLinks(res *mcp.CallToolResult) map[string]string {
	links := map[string]string{}
	for _, c := range res.Content {
		if l, ok := c.(mcp.ResourceLink); ok {
			links[l.Name] = l.URI
		}
	}
	return links
}

func upload(t *testing.T, c *client.Client, args map[string]any) (*mcp.CallToolResult, frontend.UploadResult) {
	t.Helper()
	return callAs[frontend.UploadResult](t, c, "upload_file", args)
}

// Files in and out through an MCP client over HTTP: a text file and a
// 5 MiB binary uploaded, read by a job, which writes files of its own;
// its result links them, and resources/read returns each byte for byte,
// the large one in pieces. Paths that leave the working directory, and
// links a job made to leave it, are refused; another session's file reads
// as missing, in the same words as a file never written.
func TestDevWorkspaceFiles(t *testing.T) {
	t.Parallel()
	env := codexecEnv("CODEXEC_DATA_DIR="+t.TempDir(), "CODEXEC_VENV="+venvFor(t))
	p := startProc(t, env, os.Args[0], "dev", "--http", "127.0.0.1:0")
	url := p.waitFor(t, urlRe, time.Minute)
	c := httpClient(t, url)

	text := "héllo, wörld\nline 2\n"
	blob := make([]byte, 5<<20+123)
	rand.Read(blob)
	if res, up := upload(t, c, map[string]any{"path": "data/in.txt", "content": text}); res.IsError || up.Size != int64(len(text)) {
		t.Fatalf("upload text: %s", e2eText(res))
	}
	res, up := upload(t, c, map[string]any{"path": "data/blob.bin", "content": base64.StdEncoding.EncodeToString(blob), "encoding": "base64"})
	if res.IsError || up.URI != "codexec://workspace/data/blob.bin" {
		t.Fatalf("upload binary: %s", e2eText(res))
	}
	code := `
import os
text = open("data/in.txt", encoding="utf-8").read()
blob = open("data/blob.bin", "rb").read()
os.makedirs("out", exist_ok=True)
open("out/upper.txt", "w", encoding="utf-8").write(text.upper())
open("out/reversed.bin", "wb").write(blob[::-1])
print(len(text), len(blob))
`
	res, er := call(t, c, "execute_code", map[string]any{"code": code})
	if res.IsError || er.Stdout != fmt.Sprintf("%d %d\n", len([]rune(text)), len(blob)) {
		t.Fatalf("the job did not read the uploads: %s", e2eText(res))
	}
	links := resourceLinks(res)
	if links["upper.txt"] != "codexec://workspace/out/upper.txt" || links["reversed.bin"] != "codexec://workspace/out/reversed.bin" || len(links) != 2 {
		t.Fatalf("resource links %v; want the two files the job wrote", links)
	}
	if got, _, err := readResource(t, c, links["upper.txt"]); err != nil || string(got) != strings.ToUpper(text) {
		t.Fatalf("upper.txt read back %q, %v", got, err)
	}
	reversed := bytes.Clone(blob)
	for i, j := 0, len(reversed)-1; i < j; i, j = i+1, j-1 {
		reversed[i], reversed[j] = reversed[j], reversed[i]
	}
	if got := readWhole(t, c, links["reversed.bin"]); !bytes.Equal(got, reversed) {
		t.Fatalf("reversed.bin read back: %d bytes, not the job's %d byte for byte", len(got), len(reversed))
	}
	if got := readWhole(t, c, up.URI); !bytes.Equal(got, blob) {
		t.Fatalf("the upload read back: %d bytes, not %d byte for byte", len(got), len(blob))
	}
	if got, size, err := readResource(t, c, up.URI+"?offset=100&length=7"); err != nil || !bytes.Equal(got, blob[100:107]) || size != int64(len(blob)) {
		t.Fatalf("a piece: %v %d %v", got, size, err)
	}

	// Out of the working directory, by name or by link.
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("not yours"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, er := call(t, c, "execute_code", map[string]any{"code": fmt.Sprintf(
		"import os\nos.symlink(%q, 'link.txt')\nos.symlink(%q, 'linkdir')\n", secret, outside)}); er.Status != "ok" {
		t.Fatalf("make links: %+v", er)
	}
	for _, bad := range []string{"../x.txt", "/etc/passwd", "a/../../x", "./a", "a//b", ""} {
		if res, up := upload(t, c, map[string]any{"path": bad, "content": "x"}); !res.IsError || up.Status != "rejected" {
			t.Errorf("upload to %q: %s", bad, e2eText(res))
		}
	}
	for _, bad := range []string{"link.txt", "linkdir/secret.txt", "linkdir/new.txt"} {
		if res, _ := upload(t, c, map[string]any{"path": bad, "content": "overwritten"}); !res.IsError {
			t.Errorf("upload through the link %q: %s", bad, e2eText(res))
		}
	}
	if got, _ := os.ReadFile(secret); string(got) != "not yours" {
		t.Fatalf("a write went through a link: %q", got)
	}
	if _, err := os.Stat(filepath.Join(outside, "new.txt")); err == nil {
		t.Fatal("a write went through a link to a directory")
	}
	_, _, missing := readResource(t, c, "codexec://workspace/never-written.txt")
	if missing == nil {
		t.Fatal("a missing file read without error")
	}
	// The protocol's code for a resource that is not there, with its URI;
	// a path that names no file of a workspace is invalid params.
	for uri, code := range map[string]int{"codexec://workspace/never-written.txt": mcp.RESOURCE_NOT_FOUND, "codexec://workspace/../x": mcp.INVALID_PARAMS} {
		rerr := readResourceError(t, c, uri)
		if rerr == nil || rerr.Code != code || code == mcp.RESOURCE_NOT_FOUND && fmt.Sprint(rerr.Data) != fmt.Sprint(map[string]any{"uri": uri}) {
			t.Fatalf("read %s: error %+v; want code %d", uri, rerr, code)
		}
	}
	for _, bad := range []string{"codexec://workspace/link.txt", "codexec://workspace/linkdir/secret.txt",
		"codexec://workspace/..%2Fetc%2Fpasswd", "codexec://workspace/%2E%2E/etc/passwd", "codexec://workspace//etc/passwd",
		"codexec://workspace/data", "codexec://other/data/in.txt", "file:///etc/passwd"} {
		if got, _, err := readResource(t, c, bad); err == nil {
			t.Errorf("read %s: %q", bad, clip(string(got), 80))
		}
	}
	for _, same := range []string{"codexec://workspace/link.txt", "codexec://workspace/linkdir/secret.txt"} {
		_, _, err := readResource(t, c, same)
		if err == nil || strings.ReplaceAll(err.Error(), strings.TrimPrefix(same, "codexec://workspace/"), "P") !=
			strings.ReplaceAll(missing.Error(), "never-written.txt", "P") {
			t.Errorf("read %s: %v; want the words of a missing file (%v)", same, err, missing)
		}
	}

	// A call in another workspace (a handle) links its files with the
	// handle, and they are read there, not in the session's own.
	_, ws := callAs[frontend.WorkspaceResult](t, c, "new_workspace", map[string]any{})
	res, er = call(t, c, "execute_code", map[string]any{"code": "open('elsewhere.txt', 'w').write('in the other workspace')", "workspace": ws.Workspace})
	link := resourceLinks(res)["elsewhere.txt"]
	if res.IsError || link != "codexec://workspace/elsewhere.txt?workspace="+ws.Workspace {
		t.Fatalf("a call in workspace %s: link %q, %s", ws.Workspace, link, e2eText(res))
	}
	if got, _, err := readResource(t, c, link); err != nil || string(got) != "in the other workspace" {
		t.Fatalf("read %s: %q %v", link, got, err)
	}
	if _, _, err := readResource(t, c, "codexec://workspace/elsewhere.txt"); err == nil {
		t.Fatal("the other workspace's file read in the session's own")
	}

	// Another session of the same server: the first one's files are missing.
	other := httpClient(t, url)
	_, _, err := readResource(t, other, up.URI)
	if err == nil || strings.ReplaceAll(err.Error(), "data/blob.bin", "P") != strings.ReplaceAll(missing.Error(), "never-written.txt", "P") {
		t.Fatalf("another session read %s: %v; want the words of a missing file (%v)", up.URI, err, missing)
	}
}

func e2eText(res *mcp.CallToolResult) string { return clip(text(res), 2000) }

// In a cluster a session's files are read where they are: on the worker
// that holds its working directory, which wrote them; after that worker is
// killed, on the one that restores the directory's snapshot.
func TestClusterWorkspaceFiles(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 2)
	c := httpClient(t, cl.mcpURL)
	data := make([]byte, 300<<10)
	rand.Read(data)
	if res, _ := upload(t, c, map[string]any{"path": "in.bin", "content": base64.StdEncoding.EncodeToString(data), "encoding": "base64"}); res.IsError {
		t.Fatalf("upload: %s", e2eText(res))
	}
	res, er := call(t, c, "execute_code", map[string]any{"code": "open('out.bin', 'wb').write(open('in.bin', 'rb').read()[::-1])"})
	if res.IsError {
		t.Fatalf("write: %s", e2eText(res))
	}
	holder := er.WorkerID
	reversed := bytes.Clone(data)
	for i, j := 0, len(reversed)-1; i < j; i, j = i+1, j-1 {
		reversed[i], reversed[j] = reversed[j], reversed[i]
	}
	filesJobsOn := func() map[string]int {
		on := map[string]int{}
		for i, w := range cl.workers {
			for _, line := range strings.Split(w.Out.String(), "\n") {
				if strings.Contains(line, `msg="job started"`) && strings.Contains(line, "kind=files") {
					on[fmt.Sprintf("w%d", i+1)]++
				}
			}
		}
		return on
	}
	before := filesJobsOn()
	for range 10 {
		if got, _, err := readResource(t, c, "codexec://workspace/out.bin"); err != nil || !bytes.Equal(got, reversed) {
			t.Fatalf("read out.bin: %d bytes, %v", len(got), err)
		}
	}
	after := filesJobsOn()
	if after[holder]-before[holder] != 10 {
		t.Errorf("reads ran on %v (before %v); want all 10 on %s, which holds the files", after, before, holder)
	}
	var idx int
	if _, err := fmt.Sscanf(holder, "w%d", &idx); err != nil {
		t.Fatalf("the write ran on %q", holder)
	}
	cl.workers[idx-1].signal(syscall.SIGKILL)
	if got, _, err := readResource(t, c, "codexec://workspace/out.bin"); err != nil || !bytes.Equal(got, reversed) {
		t.Fatalf("read out.bin after %s was killed: %d bytes, %v", holder, len(got), err)
	}
}
