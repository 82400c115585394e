package worker

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killUID sends SIGKILL to every process whose real uid is uid, as this
// host's /proc shows them (the worker sees its jobs' PID namespaces from
// above), a few rounds over, so that one forked meanwhile is found too.
// It reports how many it signalled. Only for a sandbox that runs as root,
// where uid is one session's own (a rootless worker's jobs run as its own
// uid); never for uid 0.
func killUID(uid int) int {
	if uid <= 0 {
		return 0
	}
	killed := 0
	for round := 0; round < 5; round++ {
		n := 0
		for _, pid := range pidsOfUID(uid) {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
		killed += n
		if n == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return killed
}

// pidsOfUID lists the processes of /proc whose real uid is uid.
func pidsOfUID(uid int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	want := strconv.Itoa(uid)
	var pids []int
	for {
		names, err := d.Readdirnames(256)
		for _, name := range names {
			pid, perr := strconv.Atoi(name)
			if perr != nil || pid <= 1 {
				continue
			}
			if realUID(pid) == want {
				pids = append(pids, pid)
			}
		}
		if err != nil {
			return pids
		}
	}
}

// realUID is the real uid of pid as /proc/PID/status says, "" if it cannot
// be read.
func realUID(pid int) string {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "Uid:"); ok {
			if fields := strings.Fields(rest); len(fields) > 0 {
				return fields[0]
			}
			return ""
		}
	}
	return ""
}
