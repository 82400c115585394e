package frontend

// StdioMessageLimit is the largest message codexec writes on stdio. The
// official TypeScript SDK's stdio client, and every client built on it (the
// MCP Inspector, ...), keeps at most 10 MiB of input it has not parsed yet
// and closes the connection when a message passes that: the server is then
// gone for the client, with no word of why. A message just under 10 MiB
// passes or not depending on how the pipe splits it, so the limit leaves
// room. Streamable HTTP has no such limit.
const StdioMessageLimit = 8 << 20
