package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/flagenv"
	"github.com/codexec/codexec/frontend"
	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/statestore"
)

var adminKeys = statestore.Keys{Prefix: statestore.DefaultPrefix}

// runUsage prints, per tenant, its workspaces and what each keeps, and the
// tenant's totals; with --json, one JSON object per workspace.
func runUsage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("admin usage", stderr)
	var redisURL, dataDir, tenant string
	var asJSON bool
	storeFlags(f, &redisURL, &dataDir)
	f.String(&tenant, "tenant", "CODEXEC_USAGE_TENANT", "", "only this tenant's workspaces")
	f.Bool(&asJSON, "json", "CODEXEC_USAGE_JSON", false, "write one JSON object per workspace (JSON Lines)")
	if err := f.Parse(args); err != nil {
		return err
	}
	st, _, err := openStateStore(ctx, f, redisURL, dataDir)
	if err != nil {
		return err
	}
	defer st.Close()
	all, err := frontend.Usage(ctx, st, adminKeys)
	if err != nil {
		return err
	}
	var use []frontend.WorkspaceUsage
	for _, u := range all {
		if !f.Given("tenant") || u.Tenant == tenant {
			use = append(use, u)
		}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		for _, u := range use {
			if err := enc.Encode(u); err != nil {
				return err
			}
		}
		return nil
	}
	return writeUsage(stdout, use)
}

// writeUsage writes use as a table, each tenant followed by its totals.
func writeUsage(w io.Writer, use []frontend.WorkspaceUsage) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tPRINCIPAL\tWORKSPACE\tHANDLE\tFILES\tRUNS\tBYTES\tWORKDIR BYTES\tLAST USED")
	var files, runs, bytes, workdir, n int64
	flush := func(tenant string) {
		fmt.Fprintf(tw, "%s\t(total)\t%d workspaces\t\t%d\t%d\t%d\t%d\t\n", tenantName(tenant), n, files, runs, bytes, workdir)
		files, runs, bytes, workdir, n = 0, 0, 0, 0, 0
	}
	for i, u := range use {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%d\t%d\t%d\t%d\t%s\n", tenantName(u.Tenant), u.Principal, u.Scope, u.Handle, u.Files, u.Runs, u.Bytes,
			u.WorkdirBytes, u.LastUsed.UTC().Format(time.RFC3339))
		files, runs, bytes, workdir, n = files+u.Files, runs+u.Runs, bytes+u.Bytes, workdir+u.WorkdirBytes, n+1
		if i == len(use)-1 || use[i+1].Tenant != u.Tenant {
			flush(u.Tenant)
		}
	}
	return tw.Flush()
}

func tenantName(t string) string {
	if t == "" {
		return "(none)"
	}
	return t
}

// runGC removes, now, the workspaces unused for --older-than.
func runGC(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("admin gc", stderr)
	var redisURL, dataDir string
	var olderThan time.Duration
	var dryRun bool
	storeFlags(f, &redisURL, &dataDir)
	f.Duration(&olderThan, "older-than", "CODEXEC_WORKSPACE_TTL", frontend.DefaultWorkspaceTTL, "remove the workspaces unused for this long")
	f.Bool(&dryRun, "dry-run", "CODEXEC_GC_DRY_RUN", false, "list what would be removed, remove nothing")
	if err := f.Parse(args); err != nil {
		return err
	}
	if olderThan <= 0 {
		return flagenv.UsageError{Err: errors.New("--older-than must be positive")}
	}
	st, from, err := openStateStore(ctx, f, redisURL, dataDir)
	if err != nil {
		return err
	}
	defer st.Close()
	gone, err := frontend.Collect(ctx, st, adminKeys, time.Now().Add(-olderThan), dryRun)
	verb := "removed"
	if dryRun {
		verb = "would remove"
	}
	for _, u := range gone {
		fmt.Fprintf(stdout, "%s workspace %s of %s/%s: %d code files, %d runs, %d bytes, last used %s\n", verb, u.Scope,
			tenantName(u.Tenant), u.Principal, u.Files, u.Runs, u.Bytes, u.LastUsed.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(stdout, "%s %d workspaces unused for %s from %s\n", verb, len(gone), olderThan, from)
	if !dryRun && len(gone) > 0 {
		fmt.Fprintln(stdout, "Every worker removes its copies of them (directories, disk images, snapshots) within 5 s; a stopped worker when it starts.")
	}
	return err
}

// runRevoke revokes (or, with --undo, restores) a tenant or one principal
// of it on every frontend of the cluster, and says what it cannot stop.
func runRevoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("admin revoke", stderr)
	var redisURL, dataDir, tenant, principal string
	var undo bool
	storeFlags(f, &redisURL, &dataDir)
	f.String(&tenant, "tenant", "CODEXEC_REVOKE_TENANT", "", "the tenant to revoke (required)")
	f.String(&principal, "principal", "CODEXEC_REVOKE_PRINCIPAL", "", "revoke only this principal of the tenant (all its tokens)")
	f.Bool(&undo, "undo", "CODEXEC_REVOKE_UNDO", false, "lift the revocation instead")
	if err := f.Parse(args); err != nil {
		return err
	}
	if tenant == "" {
		return flagenv.UsageError{Err: errors.New("--tenant is required")}
	}
	st, _, err := openStateStore(ctx, f, redisURL, dataDir)
	if err != nil {
		return err
	}
	defer st.Close()
	who := fmt.Sprintf("tenant %q", tenant)
	if principal != "" {
		who += fmt.Sprintf(", principal %q", principal)
	}
	field := statestore.RevokedField(tenant, principal)
	if undo {
		if err := st.HDel(ctx, adminKeys.Revoked(), field); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: revocation lifted; frontends let its calls in again within a second\n", who)
		return nil
	}
	if err := st.HSet(ctx, adminKeys.Revoked(), field, []byte(time.Now().UTC().Format(time.RFC3339))); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s revoked: every frontend refuses its requests (403) within a second and cancels the jobs its calls still wait for; every worker stops its running jobs and contexts, and refuses its queued jobs, within a second too.\n", who)
	return nil
}

// collectEvery collects the workspaces unused for --workspace-ttl every
// --gc-every, from the first tick on, until ctx ends or the returned stop
// is called (which waits for a collection under way).
func (ff *frontendFlags) collectEvery(ctx context.Context, st statestore.Store, log *slog.Logger) (stop func()) {
	if ff.gcEvery <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(ff.gcEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			gone, err := frontend.Collect(ctx, st, adminKeys, time.Now().Add(-ff.workspaceTTL), false)
			if err != nil && ctx.Err() == nil {
				log.Warn("collect expired workspaces", "collected", len(gone), "err", err)
			} else if len(gone) > 0 {
				log.Info("collected expired workspaces", "collected", len(gone), "unused_for", ff.workspaceTTL)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// watchRevocations runs fe.WatchRevocations, with authentication only,
// until ctx ends or the returned stop is called.
func watchRevocations(ctx context.Context, fe *frontend.Frontend, access auth.Policy) (stop func()) {
	if access.Authenticator == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); fe.WatchRevocations(ctx) }()
	return func() { cancel(); <-done }
}
