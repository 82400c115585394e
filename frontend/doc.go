// Package frontend is codexec's MCP server: it speaks MCP (stdio or
// Streamable HTTP), validates tool input, derives the session scope a call
// belongs to, publishes jobs through the broker and turns results into MCP
// tool results.
//
// A frontend keeps no state of its own that a user could lose: sessions'
// settings, code files and recorded runs live in the state store (code
// files and runs through package codefiles) and results in JetStream, so
// any frontend of a cluster can serve any call and a restarted frontend
// loses nothing but its open connections.
//
// Client-supplied file paths become code-file names in one place,
// codefiles.CodeStore.Resolve; see there for what is accepted.
//
// A tool that fails returns a *toolError (errors.go) from its helpers; it
// becomes an MCP result in one place per result shape: execFailure for the
// tools that run code, envFailure for the environment tools, fileFailure
// for the code-file tools and listFailure for the listings.
//
// Session scopes (see scope.go) decide whose working directory and files a
// call touches. They are derived from the transport, never taken from tool
// arguments: stdio is one scope; each Streamable HTTP session is its own
// scope; a request of a sessionless protocol revision (2026-07-28 and later)
// belongs to its authenticated principal.
package frontend
