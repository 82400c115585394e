package worker

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tinyPNG is a PNG of w×h pixels.
func tinyPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	img.Set(0, 0, color.RGBA{R: 200, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// What a job displays comes back as pictures, in order, byte for byte
// (display() of an object with _repr_png_, of PNG bytes); what has only a
// text form is printed; matplotlib is told to draw with Agg.
func TestJobPicturesInResult(t *testing.T) {
	fx := newLifecycleFixture(t)
	w := startDiskWorker(t, fx, ExecZygote)
	a, b := tinyPNG(t, 1, 1), tinyPNG(t, 3, 2)
	code := fmt.Sprintf(`
import base64, os
a, b = base64.b64decode(%q), base64.b64decode(%q)
class P:
    def _repr_png_(self):
        return a
class M:
    def _repr_markdown_(self):
        return "| k | v |"
class H:
    def _repr_html_(self):
        return "<table><tr><td>1</td><td>2</td></tr></table>"
display(P())
display(M(), H())
display(b)
print(os.environ["MPLBACKEND"], "CODEXEC_DISPLAY_DIR" in os.environ)
`, base64.StdEncoding.EncodeToString(a), base64.StdEncoding.EncodeToString(b))
	res := runDiskJob(t, fx, "pictures", code, 0)
	if res.Status != "ok" || res.Stdout != "| k | v |\n1\t2\nAgg False\n" {
		t.Fatalf("status %s (%s), stdout %q, stderr %q", res.Status, res.Message, res.Stdout, res.Stderr)
	}
	if len(res.Images) != 2 || !bytes.Equal(res.Images[0].Data, a) || !bytes.Equal(res.Images[1].Data, b) ||
		res.Images[0].MIMEType != "image/png" || len(res.Notes) != 0 {
		t.Fatalf("%d images, notes %q; want the two pictures in order", len(res.Images), res.Notes)
	}
	if _, err := os.Stat(filepath.Join(sessionWork(w, "pictures"), DisplayDir, res.JobID)); !os.IsNotExist(err) {
		t.Errorf("the job's pictures were not removed: %v", err)
	}
}

// Pictures past the limits are left out with a note saying which and why:
// past the count, too large, not a PNG, not a regular file; a link the job
// put in their place (or in place of their directory) is not followed,
// and what it points to is neither read nor removed.
func TestJobPicturesLimited(t *testing.T) {
	fx := newLifecycleFixture(t)
	startDiskWorker(t, fx, ExecZygote)
	p := tinyPNG(t, 1, 1)
	pb64 := base64.StdEncoding.EncodeToString(p)
	outside := t.TempDir()
	secret := filepath.Join(outside, "0001.png")
	if err := os.WriteFile(secret, p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(outside, 0o755); err != nil {
		t.Fatal(err)
	}

	t.Run("count", func(t *testing.T) {
		res := runDiskJob(t, fx, "pictures-count", fmt.Sprintf("import base64\np = base64.b64decode(%q)\nfor _ in range(%d):\n    display(p)\n", pb64, maxImages+2), 0)
		if len(res.Images) != maxImages || len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "2 more picture(s) left out") {
			t.Fatalf("%d images, notes %q", len(res.Images), res.Notes)
		}
	})
	t.Run("files the job planted", func(t *testing.T) {
		code := fmt.Sprintf(`
import base64, os
p = base64.b64decode(%q)
d = os.path.join(".codexec/display", os.path.basename(__file__).split("_")[0])  # the job's id
os.makedirs(d)
open(os.path.join(d, "0001.png"), "wb").write(b"GIF89a not a png")
open(os.path.join(d, "0002.png"), "wb").write(p[:8] + b"x" * (%d))
os.symlink(%q, os.path.join(d, "0003.png"))
os.mkfifo(os.path.join(d, "0004.png"))
open(os.path.join(d, "0005.png"), "wb").write(p)
`, pb64, maxImageBytes, secret)
		res := runDiskJob(t, fx, "pictures-planted", code, 0)
		want := []string{"picture 1 left out: not a PNG image", "picture 2 left out: 2097160 bytes, more than the limit of 2MiB per picture",
			"picture 3 left out: not a regular file", "picture 4 left out: not a regular file"}
		if res.Status != "ok" || len(res.Images) != 1 || !bytes.Equal(res.Images[0].Data, p) || strings.Join(res.Notes, "|") != strings.Join(want, "|") {
			t.Fatalf("status %s %q: %d images, notes %q; want 1 and %q", res.Status, res.Stderr, len(res.Images), res.Notes, want)
		}
	})
	t.Run("directory replaced by a link", func(t *testing.T) {
		code := fmt.Sprintf("import os\nd = os.path.join('.codexec/display', os.path.basename(__file__).split('_')[0])\nos.makedirs(os.path.dirname(d))\nos.symlink(%q, d)\n", outside)
		res := runDiskJob(t, fx, "pictures-link", code, 0)
		if res.Status != "ok" || len(res.Images) != 0 || len(res.Notes) != 1 {
			t.Fatalf("status %s: %d images, notes %q; want none, and a note", res.Status, len(res.Images), res.Notes)
		}
	})
	if got, err := os.ReadFile(secret); err != nil || !bytes.Equal(got, p) {
		t.Fatalf("the file outside the working directory was touched: %v", err)
	}
}
