package codefiles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/codexec/codexec/codefiles/internal/safedir"
	"github.com/codexec/codexec/wire"
	"github.com/oklog/ulid/v2"
)

// ExportStats counts what Export wrote for one session.
type ExportStats struct {
	Scope string
	Files int
	Runs  int
}

// Export writes the code files and recorded runs of scope as plain files
// below dir (`codexec export`):
//
//	dir/<scope>/files/<name>              each code file, as stored
//	dir/<scope>/runs/<job id>_<filename>  the code each recorded run ran
//	dir/<scope>/runs.json                 the runs' metadata, newest first
//
// Every name is validated again before it becomes a path, and nothing below
// dir is followed if it is a symbolic link (package safedir): an existing
// file is replaced, a linked directory refused. Runs whose code has expired
// between listing and reading are skipped.
func (cs *CodeStore) Export(ctx context.Context, dir, scope string) (ExportStats, error) {
	st := ExportStats{Scope: scope}
	if !wire.ValidScope(scope) {
		return st, fmt.Errorf("export: invalid session scope %q", scope)
	}
	files, err := cs.List(ctx, scope)
	if err != nil {
		return st, fmt.Errorf("export %s: list files: %w", scope, err)
	}
	if len(files) > 0 {
		d, err := safedir.Open(dir, true, scope, "files")
		if err != nil {
			return st, fmt.Errorf("export %s: %w", scope, err)
		}
		defer d.Close()
		for _, fi := range files {
			if n, err := validName(fi.Name); err != nil || n != fi.Name {
				continue
			}
			content, _, err := cs.Read(ctx, scope, fi.Name)
			if errors.Is(err, ErrFileNotFound) {
				continue // deleted meanwhile
			}
			if err != nil {
				return st, fmt.Errorf("export %s: read %s: %w", scope, fi.Name, err)
			}
			if err := d.WriteFile(fi.Name, []byte(content)); err != nil {
				return st, fmt.Errorf("export %s: %w", scope, err)
			}
			st.Files++
		}
	}
	runs, err := cs.Runs(ctx, scope)
	if err != nil {
		return st, fmt.Errorf("export %s: list runs: %w", scope, err)
	}
	if len(runs) == 0 {
		return st, nil
	}
	d, err := safedir.Open(dir, true, scope, "runs")
	if err != nil {
		return st, fmt.Errorf("export %s: %w", scope, err)
	}
	defer d.Close()
	written := make([]RunInfo, 0, len(runs))
	for _, r := range runs {
		if _, err := ulid.ParseStrict(r.JobID); err != nil {
			continue
		}
		code, _, err := cs.ReadRun(ctx, scope, r.JobID)
		if errors.Is(err, ErrRunNotFound) {
			continue
		}
		if err != nil {
			return st, fmt.Errorf("export %s: read run %s: %w", scope, r.JobID, err)
		}
		if err := d.WriteFile(r.JobID+"_"+wire.CleanFilename(r.Filename), []byte(code)); err != nil {
			return st, fmt.Errorf("export %s: %w", scope, err)
		}
		written = append(written, r)
		st.Runs++
	}
	index, err := json.MarshalIndent(written, "", "  ")
	if err != nil {
		return st, err
	}
	top, err := safedir.Open(dir, true, scope)
	if err != nil {
		return st, fmt.Errorf("export %s: %w", scope, err)
	}
	defer top.Close()
	if err := top.WriteFile("runs.json", append(index, '\n')); err != nil {
		return st, fmt.Errorf("export %s: %w", scope, err)
	}
	return st, nil
}
