package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/codexec/codexec/cmd/codexec/internal/cli"
)

// TestMain lets the end-to-end tests run this test binary as the codexec
// binary itself (CODEXEC_E2E_MAIN=1), so they exercise the real main path,
// race detector included, without a separate build step.
func TestMain(m *testing.M) {
	if os.Getenv("CODEXEC_E2E_MAIN") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}
