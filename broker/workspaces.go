package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WorkspacesBucket is the object store holding snapshots of sessions'
// working directories: one object per snapshot, named by the worker that
// took it (see worker/workspace), written once and read by the worker that
// next runs the session's job elsewhere.
const WorkspacesBucket = "codexec-workspaces"

// WorkspaceRetention is how long a snapshot is kept after it was written:
// a session idle for longer keeps its files only on the worker that held
// them last.
const WorkspaceRetention = 7 * 24 * time.Hour

// ErrWorkspaceNotFound is returned by GetWorkspace for a snapshot that is
// not (or no longer) stored.
var ErrWorkspaceNotFound = errors.New("broker: workspace snapshot not found")

// workspaceStore is the Broker's handle on WorkspacesBucket, opened once.
type workspaceStore struct {
	mu    sync.Mutex
	store jetstream.ObjectStore
}

// workspaces opens the snapshots' object store, creating it on first use:
// only workers that keep workspaces need it.
func (b *Broker) workspaces(ctx context.Context) (jetstream.ObjectStore, error) {
	b.ws.mu.Lock()
	defer b.ws.mu.Unlock()
	if b.ws.store != nil {
		return b.ws.store, nil
	}
	store, err := b.js.CreateOrUpdateObjectStore(ctx, b.objectStoreConfig(jetstream.ObjectStoreConfig{
		Bucket:      WorkspacesBucket,
		Description: "codexec snapshots of sessions' working directories",
		TTL:         WorkspaceRetention,
	}))
	if err != nil {
		return nil, fmt.Errorf("broker: create object store %s: %w", WorkspacesBucket, err)
	}
	b.ws.store = store
	return store, nil
}

// PutWorkspace stores the snapshot read from r as name. A read error of r
// fails the put and leaves no object behind.
func (b *Broker) PutWorkspace(ctx context.Context, name string, r io.Reader) error {
	store, err := b.workspaces(ctx)
	if err != nil {
		return err
	}
	if _, err := store.Put(ctx, jetstream.ObjectMeta{Name: name}, r); err != nil {
		return fmt.Errorf("broker: put workspace %s: %w", name, err)
	}
	return nil
}

// GetWorkspace opens the snapshot name; the caller closes it. A reader
// that reaches its end has checked the snapshot's digest.
func (b *Broker) GetWorkspace(ctx context.Context, name string) (io.ReadCloser, error) {
	store, err := b.workspaces(ctx)
	if err != nil {
		return nil, err
	}
	r, err := store.Get(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrWorkspaceNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("broker: get workspace %s: %w", name, err)
	}
	return r, nil
}

// DeleteWorkspace removes the snapshot name; a missing one is not an error.
func (b *Broker) DeleteWorkspace(ctx context.Context, name string) error {
	store, err := b.workspaces(ctx)
	if err != nil {
		return err
	}
	if err := store.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("broker: delete workspace %s: %w", name, err)
	}
	return nil
}

// HasWorkspace says whether the snapshot name is stored (deleted ones,
// whose info the object store keeps, are not).
func (b *Broker) HasWorkspace(ctx context.Context, name string) (bool, error) {
	store, err := b.workspaces(ctx)
	if err != nil {
		return false, err
	}
	info, err := store.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("broker: workspace %s: %w", name, err)
	}
	return !info.Deleted, nil
}

// LinkWorkspace makes link (an object of the workspaces store that is a
// link) name the stored snapshot target, replacing what it named before: a
// session's newest snapshot, found by a name that does not change, for when
// the state store has lost the session's record.
func (b *Broker) LinkWorkspace(ctx context.Context, link, target string) error {
	store, err := b.workspaces(ctx)
	if err != nil {
		return err
	}
	info, err := store.GetInfo(ctx, target)
	if err == nil {
		_, err = store.AddLink(ctx, link, info)
	}
	if err != nil {
		return fmt.Errorf("broker: link workspace %s to %s: %w", link, target, err)
	}
	return nil
}

// LinkedWorkspace returns the name of the snapshot that link names, and
// whether that snapshot is stored; a missing link is no error.
func (b *Broker) LinkedWorkspace(ctx context.Context, link string) (string, bool, error) {
	store, err := b.workspaces(ctx)
	if err != nil {
		return "", false, err
	}
	info, err := store.GetInfo(ctx, link)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("broker: workspace link %s: %w", link, err)
	}
	if info.Deleted || info.Opts == nil || info.Opts.Link == nil || info.Opts.Link.Bucket != WorkspacesBucket {
		return "", false, nil
	}
	name := info.Opts.Link.Name
	stored, err := b.HasWorkspace(ctx, name)
	return name, stored, err
}
