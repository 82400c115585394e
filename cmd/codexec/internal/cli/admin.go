package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/flagenv"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
)

// runAdmin dispatches the operator's commands on a cluster's (or dev's)
// state: audit.
func runAdmin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, adminUsage)
		return flagenv.UsageError{Err: errors.New("an admin command is required")}
	}
	switch args[0] {
	case "audit":
		return runAudit(ctx, args[1:], stdout, stderr)
	case "usage":
		return runUsage(ctx, args[1:], stdout, stderr)
	case "gc":
		return runGC(ctx, args[1:], stdout, stderr)
	case "revoke":
		return runRevoke(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, adminUsage)
		return nil
	}
	fmt.Fprint(stderr, adminUsage)
	return flagenv.UsageError{Err: fmt.Errorf("unknown admin command %q", args[0])}
}

const adminUsage = `Usage:
  codexec admin audit [flags]   write tenants' audit records (one per job) as JSON Lines
  codexec admin usage [flags]   what each tenant and workspace keeps in the state store
  codexec admin gc [flags]      remove the workspaces unused for --older-than, now
  codexec admin revoke [flags]  refuse a tenant's or a principal's calls on every frontend (--undo lifts it)

Run "codexec admin <command> -h" for a command's flags.
`

// runAudit writes the audit records of one tenant (or every tenant) of the
// days from --since to --until, as JSON Lines, oldest day first.
func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("admin audit", stderr)
	var redisURL, dataDir, tenant, since, until string
	storeFlags(f, &redisURL, &dataDir)
	f.String(&tenant, "tenant", "CODEXEC_AUDIT_TENANT", "", "export this tenant's records (the tenant of its tokens; empty with --all-tenants)")
	all := false
	f.Bool(&all, "all-tenants", "CODEXEC_AUDIT_ALL", false, "export every tenant's records")
	f.String(&since, "since", "CODEXEC_AUDIT_SINCE", "", "first day, YYYY-MM-DD in UTC (default: 30 days ago)")
	f.String(&until, "until", "CODEXEC_AUDIT_UNTIL", "", "last day, YYYY-MM-DD in UTC (default: today)")
	if err := f.Parse(args); err != nil {
		return err
	}
	if all == f.Given("tenant") {
		return flagenv.UsageError{Err: errors.New("give --tenant NAME or --all-tenants")}
	}
	first, last, err := auditDays(since, until, time.Now())
	if err != nil {
		return flagenv.UsageError{Err: err}
	}
	st, _, err := openStateStore(ctx, f, redisURL, dataDir)
	if err != nil {
		return err
	}
	defer st.Close()
	tenants := []string{tenant}
	if all {
		if tenants, err = auditTenants(ctx, st); err != nil {
			return err
		}
	}
	keys := statestore.Keys{Prefix: statestore.DefaultPrefix}
	for _, t := range tenants {
		for d := first; !d.After(last); d = d.AddDate(0, 0, 1) {
			data, err := st.Get(ctx, keys.Audit(wire.TenantKey(t), wire.AuditDay(d)))
			if errors.Is(err, statestore.ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("audit of %q on %s: %w", t, d.Format(time.DateOnly), err)
			}
			if _, err := stdout.Write(data); err != nil {
				return err
			}
		}
	}
	return nil
}

// auditDays parses --since and --until (defaults: 30 days before now, and
// now), as days in UTC.
func auditDays(since, until string, now time.Time) (time.Time, time.Time, error) {
	today := now.UTC().Truncate(24 * time.Hour)
	first, last := today.AddDate(0, 0, -30), today
	var err error
	if since != "" {
		if first, err = time.Parse(time.DateOnly, since); err != nil {
			return first, last, fmt.Errorf("--since %q: want YYYY-MM-DD", since)
		}
	}
	if until != "" {
		if last, err = time.Parse(time.DateOnly, until); err != nil {
			return first, last, fmt.Errorf("--until %q: want YYYY-MM-DD", until)
		}
	}
	if last.Before(first) {
		return first, last, fmt.Errorf("--until %s is before --since %s", last.Format(time.DateOnly), first.Format(time.DateOnly))
	}
	return first, last, nil
}

// auditTenants lists the tenants with audit records, sorted.
func auditTenants(ctx context.Context, st statestore.Store) ([]string, error) {
	m, err := st.HGetAll(ctx, statestore.Keys{Prefix: statestore.DefaultPrefix}.AuditTenants())
	if err != nil {
		return nil, fmt.Errorf("list the audit's tenants: %w", err)
	}
	var out []string
	for _, name := range m {
		out = append(out, string(name))
	}
	slices.Sort(out)
	return out, nil
}
