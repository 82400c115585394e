//go:build !linux

package cgroup

import "errors"

// signal is never reached: cgroups are Linux's, so Detect fails elsewhere.
func (l layout) signal([]int) error { return errors.ErrUnsupported }
