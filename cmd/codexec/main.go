// Command codexec is an MCP server that runs Python for language models.
// See README.md; `codexec help` lists the subcommands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/codexec/codexec/cmd/codexec/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
