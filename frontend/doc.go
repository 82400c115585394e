// Package frontend is codexec's MCP server: it speaks MCP (stdio or
// Streamable HTTP), validates tool input, derives the session scope a call
// belongs to, publishes jobs through the broker and turns results into MCP
// tool results.
//
// A frontend keeps no state of its own that a user could lose: sessions'
// settings, code files and recorded runs live in the state store (CodeStore)
// and results in JetStream, so any frontend of a cluster can serve any call
// and a restarted frontend loses nothing but its open connections.
//
// Client-supplied file paths become code-file names in one place,
// resolveFilePath (paths.go); see there for what is accepted.
//
// Session scopes (see scope.go) decide whose working directory and files a
// call touches. They are derived from the transport, never taken from tool
// arguments: stdio is one scope; each Streamable HTTP session is its own
// scope; a request of a sessionless protocol revision (2026-07-28 and later)
// belongs to its authenticated principal.
package frontend
