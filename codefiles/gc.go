package codefiles

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/codexec/codexec/wire"
)

// LastWrites returns, for every scope with code files or recorded runs,
// when it last wrote one (a code-file write or a recorded run).
func (cs *CodeStore) LastWrites(ctx context.Context) (map[string]time.Time, error) {
	all, err := cs.st.HGetAll(ctx, cs.keys.Scopes())
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(all))
	for s, v := range all {
		ms, err := strconv.ParseInt(string(v), 10, 64)
		if wire.ValidScope(s) && err == nil {
			out[s] = time.UnixMilli(ms)
		}
	}
	return out, nil
}

// Counts returns how many code files and recorded runs scope holds, and
// the bytes counted against its budget.
func (cs *CodeStore) Counts(ctx context.Context, scope string) (files, runs, bytes int64, err error) {
	if files, err = cs.st.HLen(ctx, cs.keys.CodeFiles(scope)); err != nil {
		return
	}
	if runs, err = cs.st.HLen(ctx, cs.keys.Runs(scope)); err != nil {
		return
	}
	bytes, err = cs.Usage(ctx, scope)
	return
}

// DeleteScope removes everything scope keeps here: its code files (and
// their on-disk copies), its runs and their code, its byte counter, and
// its entry among the scopes.
func (cs *CodeStore) DeleteScope(ctx context.Context, scope string) error {
	files, err := cs.List(ctx, scope)
	if err != nil {
		return fmt.Errorf("list code files of %s: %w", scope, err)
	}
	for _, f := range files {
		if _, err := cs.Delete(ctx, scope, f.Name); err != nil {
			return fmt.Errorf("delete code file %s of %s: %w", f.Name, scope, err)
		}
	}
	runs, expired, err := cs.loadRuns(ctx, scope)
	if err != nil {
		return fmt.Errorf("list runs of %s: %w", scope, err)
	}
	for _, r := range runs {
		expired = append(expired, r.JobID)
	}
	if err := cs.dropRuns(ctx, scope, expired); err != nil {
		return fmt.Errorf("delete runs of %s: %w", scope, err)
	}
	runsKey := cs.keys.Runs(scope)
	if err := cs.st.Delete(ctx, cs.keys.CodeFiles(scope), runsKey, runsKey+":links", runsKey+":refs", cs.keys.Usage(scope)); err != nil {
		return err
	}
	return cs.st.HDel(ctx, cs.keys.Scopes(), scope)
}
