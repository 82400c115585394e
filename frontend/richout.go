package frontend

import (
	"encoding/base64"
	"strings"

	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
)

// addRichContent adds to an execution's result what is not text: the
// pictures it displayed, links to the files it wrote.
func addRichContent(out *mcp.CallToolResult, r *wire.Result) {
	addPictures(out, r)
	addFileLinks(out, r)
}

// addPictures puts the pictures a job displayed into its tool result, as
// MCP image content after the text, and the worker's notes on what it left
// out as a line of text before them.
func addPictures(out *mcp.CallToolResult, r *wire.Result) {
	if len(r.Notes) > 0 {
		out.Content = append(out.Content, mcp.NewTextContent("[pictures: "+strings.Join(r.Notes, "; ")+"]"))
	}
	for _, img := range r.Images {
		out.Content = append(out.Content, mcp.NewImageContent(base64.StdEncoding.EncodeToString(img.Data), img.MIMEType))
	}
}

// OutputFiles name, in ExecResult, the files of the working directory that
// hold the whole of a stream cut at the output limit.
type OutputFiles struct {
	StdoutFile string `json:"stdout_file,omitempty" jsonschema_description:"when stdout was cut: the file of the working directory that holds all of it"`
	StderrFile string `json:"stderr_file,omitempty" jsonschema_description:"when stderr was cut: the file of the working directory that holds all of it"`
}

// Pictures say, in ExecResult, how many pictures the result holds as image
// content, and what was left out.
type Pictures struct {
	Images int    `json:"images,omitempty" jsonschema_description:"how many pictures the job displayed are in the result, as image content after the text"`
	Notes  string `json:"picture_notes,omitempty" jsonschema_description:"which pictures were left out, and why"`
}

func outputFilesOf(r *wire.Result) OutputFiles {
	return OutputFiles{StdoutFile: r.StdoutFile, StderrFile: r.StderrFile}
}

func picturesOf(r *wire.Result) Pictures {
	return Pictures{Images: len(r.Images), Notes: strings.Join(r.Notes, "; ")}
}
