//go:build !linux

package sandbox
