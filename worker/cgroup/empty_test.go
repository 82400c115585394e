package cgroup

import (
	"bufio"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// A process joins the pids controller's group first (ProcsFiles, Add):
// that is what lets Kill, KillFound and Reset take a group whose
// pids.current is 0 for empty without reading every cgroup.procs.
func TestProcsFilesListThePidsControllerFirst(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	g := newGroup(t, m, Limits{})
	files := g.ProcsFiles()
	if len(files) != len(g.l.dirs()) || files[0] != g.l.pids+"/cgroup.procs" {
		t.Fatalf("ProcsFiles = %v, want %s/cgroup.procs first and one per directory of %v", files, g.l.pids, g.l.dirs())
	}
}

// A process stopped part-way into its group, after the first of
// ProcsFiles (a start cut short), is in no other controller's group yet,
// and still Kill finds and kills it, as do KillFound and Reset.
func TestKillFindsAProcessPartWayIntoItsGroup(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	for _, kill := range []struct {
		name string
		do   func(g *Group) error
	}{
		{"Kill", (*Group).Kill},
		{"KillFound", func(g *Group) error {
			found, err := g.KillFound()
			if err == nil && !found {
				t.Error("KillFound said it found nothing")
			}
			return err
		}},
		{"Reset", func(g *Group) error {
			found, err := g.Reset(Limits{Pids: 8})
			if err == nil && !found {
				t.Error("Reset said it found nothing")
			}
			return err
		}},
	} {
		g := newGroup(t, m, Limits{})
		cmd := exec.Command("/bin/sh", "-c", `echo 0 > "$1" && echo joined && exec sleep 1000`, "sh", g.ProcsFiles()[0])
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || strings.TrimSpace(line) != "joined" {
			t.Fatalf("%s: read %q, %v; want joined", kill.name, line, err)
		}
		if err := kill.do(g); err != nil {
			t.Fatalf("%s: %v", kill.name, err)
		}
		if pids, err := g.l.procs(); err != nil || len(pids) != 0 {
			t.Errorf("%s left %v (%v) in the group", kill.name, pids, err)
			continue // the cleanup kills it
		}
		_ = cmd.Wait()
		if sig := signalOf(cmd); sig != syscall.SIGKILL {
			t.Errorf("%s: the process part-way into the group ended by %v, want SIGKILL", kill.name, sig)
		}
	}
}
