package diskfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// template makes a template image in dir, its ballast set for limit.
func template(t testing.TB, dir string, limit int64) string {
	t.Helper()
	need(t)
	image, mnt := filepath.Join(dir, "template.img"), filepath.Join(dir, "template")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := MakeTemplate(context.Background(), image, mnt, 32<<30, limit); err != nil {
		t.Fatal(err)
	}
	return image
}

// blocks is what path takes on its file system's disk, in bytes.
func blocks(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// Clones of a template are file systems of their own, each mounted with
// the template's limit already set (to the block, before any SetLimit),
// each as sparse as the template, whether copied by copy_file_range on
// the same file system or by read and write from another (a tmpfs).
func TestClonesAreFileSystemsOfTheirOwn(t *testing.T) {
	const limit = 20 << 20
	dirs := map[string]string{"same file system": t.TempDir()}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		shm, err := os.MkdirTemp("/dev/shm", "diskfs-test")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(shm) })
		dirs["from a tmpfs"] = shm
	}
	for name, tdir := range dirs {
		t.Run(name, func(t *testing.T) {
			tmpl := template(t, tdir, limit)
			dir := t.TempDir()
			var fss []*FS
			for _, n := range []string{"a", "b"} {
				image, mnt := filepath.Join(dir, n+".img"), filepath.Join(dir, n)
				if err := os.Mkdir(mnt, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := Clone(tmpl, image); err != nil {
					t.Fatal(err)
				}
				if host, most := blocks(t, image), blocks(t, tmpl)+1<<20; host > most {
					t.Errorf("the clone takes %d KiB of the host's disk, the template %d KiB", host>>10, blocks(t, tmpl)>>10)
				}
				f, err := Mount(image, mnt)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = f.Unmount() })
				used, _ := f.Usage()
				avail, _ := f.Avail()
				if used+avail != limit {
					t.Errorf("a clone, mounted: %d KiB used, %d KiB free; want %d KiB in all", used>>10, avail>>10, limit>>10)
				}
				fss = append(fss, f)
			}
			if err := os.WriteFile(filepath.Join(fss[0].Work(), "only-a"), []byte("a"), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(fss[1].Work(), "only-a")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a file written in one clone is in the other: %v", err)
			}
			// The limit holds in a clone as in a file system of its own.
			fd, err := os.OpenFile(filepath.Join(fss[1].Work(), "big"), os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer fd.Close()
			if err := syscall.Fallocate(int(fd.Fd()), 0, 0, limit+4096); !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("a clone let past its limit: %v, want ENOSPC", err)
			}
		})
	}
}

// Clone refuses an image that exists, and leaves none when the template
// cannot be read.
func TestCloneRefusesAndLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	tmpl, image := filepath.Join(dir, "template.img"), filepath.Join(dir, "s.img")
	if err := os.WriteFile(tmpl, []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(image, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Clone(tmpl, image); !errors.Is(err, os.ErrExist) {
		t.Errorf("a clone over an image: %v, want ErrExist", err)
	}
	if data, _ := os.ReadFile(image); string(data) != "mine" {
		t.Errorf("the image cloned over: %q", data)
	}
	missing := filepath.Join(dir, "other.img")
	if err := Clone(filepath.Join(dir, "none.img"), missing); err == nil {
		t.Error("a clone of no template succeeded")
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed clone left its image: %v", err)
	}
}

// What a session's first call pays with a template: a copy of the
// template's data, a loop device, a mount, its limit (the default, set
// already) and the unmount. Beside BenchmarkCreateAndMount.
func BenchmarkCloneAndMount(b *testing.B) {
	dir := b.TempDir()
	tmpl := template(b, dir, 2<<30)
	benchNewImage(b, dir, func(image string) error { return Clone(tmpl, image) })
}

// A file system unmounted while another mount namespace holds a copy of
// its mount (any sandbox made on the host meanwhile) is flushed first: the
// template of a worker that started beside running sandboxes was cloned
// without its last writes (its ballast), and its clones failed with EIO.
func TestUnmountFlushesWhatAnotherNamespaceKeepsMounted(t *testing.T) {
	const limit = 20 << 20
	dir := t.TempDir()
	tmpl := template(t, dir, limit)
	image, mnt := filepath.Join(dir, "held.img"), filepath.Join(dir, "held")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Clone(tmpl, image); err != nil {
		t.Fatal(err)
	}
	f, err := Mount(image, mnt)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.Work(), "written"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A process in a mount namespace of its own, made now: it holds the
	// file system mounted after the unmount below.
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "30")
	if err := holder.Start(); err != nil {
		t.Skipf("unshare: %v", err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", holder.Process.Pid)); err == nil {
			if own, _ := os.Readlink("/proc/self/ns/mnt"); ns != own {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the holder never entered a mount namespace of its own")
		}
	}
	if err := f.Unmount(); err != nil {
		t.Fatal(err)
	}
	// What the image holds now, cloned and mounted again.
	again, amnt := filepath.Join(dir, "again.img"), filepath.Join(dir, "again")
	if err := os.Mkdir(amnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Clone(image, again); err != nil {
		t.Fatal(err)
	}
	g, err := Mount(again, amnt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Unmount() })
	if b, err := os.ReadFile(filepath.Join(g.Work(), "written")); err != nil || string(b) != "kept" {
		t.Fatalf("a file written before the unmount: %q, %v", b, err)
	}
}
