package frontend

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// A client of a protocol revision older than resource links (the
// TypeScript SDK up to 1.12 speaks 2025-03-26) rejects a whole result that
// holds one; it gets the link as a line of text. A current client gets
// the link.
func TestResourceLinksOnlyForClientsThatKnowThem(t *testing.T) {
	t.Parallel()
	f := newDevFrontend(t, Config{})
	for _, tc := range []struct {
		version string
		link    bool
	}{{"2024-11-05", false}, {"2025-03-26", false}, {"2025-06-18", true}, {mcp.LATEST_PROTOCOL_VERSION, true}} {
		t.Run(tc.version, func(t *testing.T) {
			srv := f.MCPServer(true)
			// A tool whose result links a file of the workspace, as
			// execute_code's does for the files a job wrote.
			srv.AddTool(mcp.NewTool("links_a_file"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				res := mcp.NewToolResultText("[ok]")
				res.Content = append(res.Content, mcp.NewResourceLink(workspaceURI("out.txt"), "out.txt", "a file the job wrote: out.txt", "text/plain"))
				return res, nil
			})
			c, err := client.NewInProcessClient(srv)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			if err := c.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			init := mcp.InitializeRequest{}
			init.Params.ProtocolVersion = tc.version
			init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "0"}
			if r, err := c.Initialize(t.Context(), init); err != nil || r.ProtocolVersion != tc.version {
				t.Fatalf("initialize: %v, %+v", err, r)
			}
			req := mcp.CallToolRequest{}
			req.Params.Name = "links_a_file"
			res, err := c.CallTool(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Content) != 2 {
				t.Fatalf("content %+v", res.Content)
			}
			switch c := res.Content[1].(type) {
			case mcp.ResourceLink:
				if !tc.link {
					t.Fatalf("a %s client got a resource link", tc.version)
				}
			case mcp.TextContent:
				if tc.link || !strings.Contains(c.Text, "codexec://workspace/out.txt") {
					t.Fatalf("a %s client got text %q", tc.version, c.Text)
				}
			default:
				t.Fatalf("content %T", c)
			}
		})
	}
}

// Over HTTP on a frontend that did not serve the initialize, the request's
// Mcp-Protocol-Version header says the revision; a request without it is a
// 2025-03-26 client's (the TypeScript SDK of that revision sends none).
func TestResourceLinksByProtocolHeader(t *testing.T) {
	t.Parallel()
	h := linksAsText(func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res := mcp.NewToolResultText("[ok]")
		res.Content = append(res.Content, mcp.NewResourceLink(workspaceURI("out.txt"), "out.txt", "a file the job wrote: out.txt", "text/plain"))
		return res, nil
	})
	for header, link := range map[string]bool{"": false, "2025-03-26": false, "2025-06-18": true, "2025-11-25": true} {
		r, _ := http.NewRequest("POST", "http://x/mcp", nil)
		if header != "" {
			r.Header.Set("Mcp-Protocol-Version", header)
		}
		res, err := h(httpContext(r.Context(), r), mcp.CallToolRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, isLink := res.Content[1].(mcp.ResourceLink); isLink != link {
			t.Fatalf("header %q: content %T", header, res.Content[1])
		}
	}
}
