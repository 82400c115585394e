//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package envcache

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"time"
)

func lockFile(context.Context, string) (func(), error) {
	return nil, fmt.Errorf("envcache: building environments is not supported on %s", runtime.GOOS)
}

func killGroupOnCancel(cmd *exec.Cmd) { cmd.WaitDelay = 5 * time.Second }
