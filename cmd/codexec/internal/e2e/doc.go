// Package e2e drives codexec from the outside, as its users do: it starts
// codexec processes (dev, or a cluster of nats-server, a frontend and
// workers), connects mcp-go clients over stdio and Streamable HTTP, calls
// tools and decodes their results, and summarizes latencies.
//
// The end-to-end tests of cmd/codexec and `codexec bench` share it, so it
// never imports package testing: it reports failures as errors, and a test
// wraps them in t.Fatal (see cmd/codexec/harness_test.go).
package e2e
