package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/codexec/codexec/cmd/codexec/internal/flagenv"
	"github.com/codexec/codexec/codefiles"
	"github.com/codexec/codexec/wire"
)

// runExport writes sessions' code files and recorded runs as plain files
// under --out (see codefiles.CodeStore.Export for the layout). It reads a
// cluster's Redis (--redis) or the embedded store of `codexec dev`
// (--data-dir; dev must not be running, since it holds the file's lock).
func runExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("export", stderr)
	var out, redisURL, dataDir, session string
	f.String(&out, "out", "CODEXEC_EXPORT_OUT", "", "directory to write into, created if missing (required)")
	f.String(&redisURL, "redis", "CODEXEC_REDIS_URL", "", "read a cluster's state from the Redis at this URL")
	f.String(&dataDir, "data-dir", "CODEXEC_DATA_DIR", "", "read the embedded state of codexec dev (not running) in this data directory; the default when --redis is not set: "+defaultDataDir())
	f.String(&session, "session", "CODEXEC_EXPORT_SESSION", "", "export only this session scope (e.g. local); default every session")
	if err := f.Parse(args); err != nil {
		return err
	}
	if out == "" {
		return flagenv.UsageError{Err: errors.New("--out is required")}
	}
	if session != "" && !wire.ValidScope(session) {
		return flagenv.UsageError{Err: fmt.Errorf("invalid --session %q: session scopes are lower-case letters, digits and '-'", session)}
	}
	st, from, err := openStateStore(ctx, f, redisURL, dataDir)
	if err != nil {
		return err
	}
	defer st.Close()

	cs := codefiles.NewCodeStore(st, codefiles.Config{})
	scopes := []string{session}
	if session == "" {
		var err error
		if scopes, err = cs.Scopes(ctx); err != nil {
			return fmt.Errorf("list sessions: %w", err)
		}
	}
	var files, runs int
	for _, scope := range scopes {
		n, err := cs.Export(ctx, out, scope)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: %d code files, %d runs\n", scope, n.Files, n.Runs)
		files += n.Files
		runs += n.Runs
	}
	fmt.Fprintf(stdout, "exported %d code files and %d runs of %d sessions from %s to %s\n", files, runs, len(scopes), from, out)
	return nil
}
