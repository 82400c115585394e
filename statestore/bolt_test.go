package statestore_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	berrors "go.etcd.io/bbolt/errors"

	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/statestore/storetest"
)

func openBolt(t *testing.T, path string) *statestore.BoltStore {
	t.Helper()
	s, err := statestore.OpenBolt(path)
	if err != nil {
		t.Fatalf("OpenBolt: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestBoltStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) statestore.Store {
		return openBolt(t, filepath.Join(t.TempDir(), "state.db"))
	})
}

func TestBoltStoreRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "data", "state.db")
	storetest.RunRestart(t,
		func(t *testing.T) statestore.Store { return openBolt(t, path) },
		func(*testing.T) {}, // closing the store is the restart
	)
}

func TestOpenBoltInUse(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	openBolt(t, path)

	_, err := statestore.OpenBolt(path)
	if err == nil {
		t.Fatal("second OpenBolt of the same file succeeded")
	}
	if !errors.Is(err, berrors.ErrTimeout) || !strings.Contains(err.Error(), "in use by another codexec process") {
		t.Fatalf("second OpenBolt: %v; want an in-use error wrapping bbolt's timeout", err)
	}
}
