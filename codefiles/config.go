package codefiles

import (
	"log/slog"
	"time"

	"github.com/codexec/codexec/statestore"
)

// Config configures a CodeStore. WithDefaults fills unset fields.
type Config struct {
	// Keys builds state-store keys. Default prefix statestore.DefaultPrefix.
	Keys statestore.Keys
	// MaxFileBytes is the largest a code file may grow, by initialize or by
	// appends. Default 32 MiB. A file larger than the frontend's
	// MaxCodeBytes still runs with execute_code_file: the file limit is the
	// one that applies to it.
	MaxFileBytes int64
	// MaxFiles is how many code files one session may hold. Default 256.
	MaxFiles int
	// RunHistory is how many recorded runs (the code of every job a
	// session ran) are kept per session. Default 1000.
	RunHistory int
	// RunRetention is how long a recorded run's code is kept. Default 30 days.
	RunRetention time.Duration
	// MaxSessionBytes is the most one session may keep in the state store:
	// its code files plus the code of its recorded runs, each distinct code
	// counted once. A code-file write past it is refused; a run past it
	// first drops the session's oldest runs. Default 256 MiB.
	MaxSessionBytes int64
	// MirrorDir, when set, gets a plain-file copy of every code file at
	// MirrorDir/<scope>/files/<name>, and that path is the file's
	// file_path (CodeStore.FilePath). `codexec dev` sets it to the scripts
	// directory; frontends of a cluster leave it empty and hand out
	// codexec://files/<name>.
	MirrorDir string
	// Logger receives the store's warnings. Default slog.Default().
	Logger *slog.Logger
}

// Defaults.
const (
	// DefaultMaxFileBytes is twice the largest code an execute_code call may
	// send, so a file assembled from pieces can outgrow one message.
	DefaultMaxFileBytes = 32 << 20
	DefaultMaxFiles     = 256
	DefaultRunHistory   = 1000
	DefaultRunRetention = 30 * 24 * time.Hour
	// DefaultMaxSessionBytes holds eight code files of the largest size,
	// or their runs.
	DefaultMaxSessionBytes = 256 << 20
)

// WithDefaults returns c with every unset field given its default.
func (c Config) WithDefaults() Config {
	if c.Keys.Prefix == "" {
		c.Keys.Prefix = statestore.DefaultPrefix
	}
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = DefaultMaxFileBytes
	}
	if c.MaxFiles <= 0 {
		c.MaxFiles = DefaultMaxFiles
	}
	if c.RunHistory <= 0 {
		c.RunHistory = DefaultRunHistory
	}
	if c.RunRetention <= 0 {
		c.RunRetention = DefaultRunRetention
	}
	if c.MaxSessionBytes <= 0 {
		c.MaxSessionBytes = DefaultMaxSessionBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}
