package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/codexec/codexec/cmd/codexec/internal/flagenv"
	"github.com/codexec/codexec/statestore"
)

// openStateStore opens the state store an operator command reads: a
// cluster's Redis (--redis) or the embedded store of `codexec dev`
// (--data-dir; dev must not be running, since it holds the file's lock). It
// returns the store and where it is, for messages.
func openStateStore(ctx context.Context, f *flagenv.Flags, redisURL, dataDir string) (statestore.Store, string, error) {
	// A flag on the command line wins over the environment: a machine may
	// have both CODEXEC_REDIS_URL and CODEXEC_DATA_DIR set.
	switch {
	case f.Given("redis") && f.Given("data-dir"):
		return nil, "", flagenv.UsageError{Err: errors.New("give --redis or --data-dir, not both")}
	case f.Given("redis"):
		dataDir = ""
	case f.Given("data-dir"):
		redisURL = ""
	case redisURL != "" && dataDir != "":
		return nil, "", flagenv.UsageError{Err: errors.New("both $CODEXEC_REDIS_URL and $CODEXEC_DATA_DIR are set: say which store to read with --redis or --data-dir")}
	case redisURL == "" && dataDir == "":
		dataDir = defaultDataDir()
	}
	if redisURL != "" {
		s, err := statestore.NewRedis(ctx, statestore.RedisOptions{URL: redisURL})
		if err != nil {
			return nil, "", fmt.Errorf("redis at %s: %w", redactURL(redisURL), err)
		}
		return s, redactURL(redisURL), nil
	}
	path := filepath.Join(dataDir, "state.db")
	if _, err := os.Stat(path); err != nil {
		return nil, "", fmt.Errorf("no state of codexec dev at %s: %w", path, err)
	}
	s, err := statestore.OpenBolt(path)
	if err != nil {
		return nil, "", err
	}
	return s, path, nil
}

// storeFlags registers --redis and --data-dir, the state store an operator
// command reads.
func storeFlags(f *flagenv.Flags, redisURL, dataDir *string) {
	f.String(redisURL, "redis", "CODEXEC_REDIS_URL", "", "read a cluster's state from the Redis at this URL")
	f.String(dataDir, "data-dir", "CODEXEC_DATA_DIR", "", "read the embedded state of codexec dev (not running) in this data directory; the default when --redis is not set: "+defaultDataDir())
}
