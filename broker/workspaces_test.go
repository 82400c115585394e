package broker_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
)

// A snapshot is stored, read back whole, and deleted; one whose reader
// fails leaves nothing behind; a second broker (another worker) sees it.
func TestWorkspaceSnapshots(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)

	data := bytes.Repeat([]byte("workspace"), 100_000) // several chunks
	if err := tb.b.PutWorkspace(ctx, "ws-s1-j1", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	other := brokertest.Open(t, tb.e, broker.Config{})
	r, err := other.GetWorkspace(ctx, "ws-s1-j1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (%v), want %d", len(got), err, len(data))
	}

	failing := io.MultiReader(bytes.NewReader(data[:1000]), errReader{})
	if err := tb.b.PutWorkspace(ctx, "ws-s1-j2", failing); err == nil {
		t.Fatal("a snapshot whose reader failed was stored")
	}
	if _, err := tb.b.GetWorkspace(ctx, "ws-s1-j2"); !errors.Is(err, broker.ErrWorkspaceNotFound) {
		t.Errorf("a failed snapshot: %v, want ErrWorkspaceNotFound", err)
	}

	if err := tb.b.DeleteWorkspace(ctx, "ws-s1-j1"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.GetWorkspace(ctx, "ws-s1-j1"); !errors.Is(err, broker.ErrWorkspaceNotFound) {
		t.Errorf("after delete: %v, want ErrWorkspaceNotFound", err)
	}
	if err := tb.b.DeleteWorkspace(ctx, "ws-s1-j1"); err != nil {
		t.Errorf("deleting a missing snapshot: %v", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("disk gone") }
