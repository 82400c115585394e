package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/codexec/codexec/codefiles"
	"github.com/codexec/codexec/frontend/quota"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
)

// Usage and collection of workspaces, for the operator (`codexec admin
// usage`, `codexec admin gc`). A workspace is a scope known to the state
// store: one with code files or runs (codefiles' scopes), or one a
// frontend recorded the owner of (owners.go).

// WorkspaceUsage is what one workspace holds in the state store.
type WorkspaceUsage struct {
	Scope     string `json:"workspace"`
	Tenant    string `json:"tenant"`
	Principal string `json:"principal,omitempty"`
	// Handle says the workspace has a handle (workspace_info, new_workspace).
	Handle bool  `json:"handle"`
	Files  int64 `json:"code_files"`
	Runs   int64 `json:"runs"`
	// Bytes are its code files and the distinct code of its runs.
	Bytes int64 `json:"bytes"`
	// WorkdirBytes is what its working directory took after its latest
	// job, as the worker that ran it measured (working_dir_bytes).
	WorkdirBytes int64 `json:"working_dir_bytes"`
	// LastUsed is its latest code-file write or run, or, with neither,
	// when a frontend first served it.
	LastUsed time.Time `json:"last_used"`
}

// Usage lists every workspace the store knows, by tenant, then last use.
func Usage(ctx context.Context, st statestore.Store, keys statestore.Keys) ([]WorkspaceUsage, error) {
	cs := codefiles.NewCodeStore(st, codefiles.Config{Keys: keys})
	writes, err := cs.LastWrites(ctx)
	if err != nil {
		return nil, fmt.Errorf("list workspaces: %w", err)
	}
	owned, err := st.HGetAll(ctx, keys.ScopeOwners())
	if err != nil {
		return nil, fmt.Errorf("list workspaces' owners: %w", err)
	}
	scopes := map[string]bool{}
	for s := range writes {
		scopes[s] = true
	}
	for s := range owned {
		if wire.ValidScope(s) {
			scopes[s] = true
		}
	}
	out := make([]WorkspaceUsage, 0, len(scopes))
	for s := range scopes {
		u := WorkspaceUsage{Scope: s, LastUsed: writes[s]}
		if data, err := st.Get(ctx, keys.ScopeOwner(s)); err == nil {
			var o ScopeOwner
			if json.Unmarshal(data, &o) == nil {
				u.Tenant, u.Principal = o.Tenant, o.Principal
				if o.Seen.After(u.LastUsed) {
					u.LastUsed = o.Seen
				}
			}
		}
		if _, err := st.Get(ctx, keys.ScopeHandle(s)); err == nil {
			u.Handle = true
		}
		if u.Files, u.Runs, u.Bytes, err = cs.Counts(ctx, s); err != nil {
			return nil, fmt.Errorf("usage of %s: %w", s, err)
		}
		u.WorkdirBytes = workdirBytes(ctx, st, keys, u.Tenant, s)
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b WorkspaceUsage) int {
		if a.Tenant != b.Tenant {
			return strings.Compare(a.Tenant, b.Tenant)
		}
		return a.LastUsed.Compare(b.LastUsed)
	})
	return out, nil
}

// Collect removes from the state store every workspace last used before
// cutoff: its code files, runs and their code, environment choice, the
// record of where its working directory is, its handle, its place in its
// tenant's workspaces quota and its owner record. With dryRun it removes
// nothing. It returns the workspaces it removed (or would).
func Collect(ctx context.Context, st statestore.Store, keys statestore.Keys, cutoff time.Time, dryRun bool) ([]WorkspaceUsage, error) {
	all, err := Usage(ctx, st, keys)
	if err != nil {
		return nil, err
	}
	var gone []WorkspaceUsage
	for _, u := range all {
		if !u.LastUsed.Before(cutoff) {
			continue
		}
		if !dryRun {
			if err := collectWorkspace(ctx, st, keys, u); err != nil {
				return gone, errors.Join(err, announceCollected(ctx, st, keys, len(gone)+1))
			}
		}
		gone = append(gone, u)
	}
	if dryRun {
		return gone, nil
	}
	return gone, announceCollected(ctx, st, keys, len(gone))
}

// collectWorkspace removes what the state store holds of u.
func collectWorkspace(ctx context.Context, st statestore.Store, keys statestore.Keys, u WorkspaceUsage) error {
	doomed := []string{keys.Session(u.Scope), keys.Workspace(u.Scope), keys.ScopeHandle(u.Scope), keys.ScopeOwner(u.Scope)}
	if data, err := st.Get(ctx, keys.ScopeHandle(u.Scope)); err == nil {
		var sh scopeHandle
		if json.Unmarshal(data, &sh) == nil && sh.Key != "" {
			doomed = append(doomed, keys.Handle(sh.Key))
		}
	} else if !errors.Is(err, statestore.ErrNotFound) {
		return err
	}
	// The notice for the workers first: a collection that stops half way
	// has told them, and the next one tells them again.
	if err := noteCollected(ctx, st, keys, u.Scope); err != nil {
		return err
	}
	// The handle's record goes first (with the settings), so that the
	// handle names nothing while the rest of the workspace is removed.
	if err := st.Delete(ctx, doomed...); err != nil {
		return fmt.Errorf("delete workspace %s: %w", u.Scope, err)
	}
	cs := codefiles.NewCodeStore(st, codefiles.Config{Keys: keys}).ForTenant(tenantCodeQuota(keys, nil, u.Tenant))
	if err := cs.DeleteScope(ctx, u.Scope); err != nil {
		return err
	}
	if err := forgetWorkdirBytes(ctx, st, keys, u.Tenant, u.Scope); err != nil {
		return err
	}
	if err := st.Leave(ctx, keys.Quota(quota.Workspaces, wire.TenantKey(u.Tenant)), u.Scope); err != nil {
		return err
	}
	return st.HDel(ctx, keys.ScopeOwners(), u.Scope)
}
