package cli

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/codexec/codexec/cmd/codexec/internal/flagenv"
)

// One log format for every line a role writes on stderr: codexec's own
// logs, the embedded NATS server's (broker.EmbeddedConfig.Logger), the NATS
// client's (broker.Config.Logger), go-redis's (redis.SetLogger), mcp-go's
// (the frontend hands it the same logger), the standard log package's (the
// HTTP server's errors: slog.SetDefault routes it), the zygotes' output
// (runner's line logger) and the error a role stops with (logged). Only a
// command line refused before the logger exists is written as plain text.

// Log formats (--log-format).
const (
	logText = "text"
	logJSON = "json"
)

// logFlags are the logging settings of every role.
type logFlags struct {
	level, format string
}

func (lf *logFlags) register(f *flagenv.Flags) {
	f.String(&lf.level, "log-level", "CODEXEC_LOG_LEVEL", "info", "debug, info, warn or error (logs go to stderr)")
	f.Choice(&lf.format, "log-format", "CODEXEC_LOG_FORMAT", logText, []string{logText, logJSON},
		"text: key=value lines (logfmt); json: one JSON object a line. Every line on stderr has it, the libraries' included")
}

// logger builds the role's logger on w and makes it the process's, for the
// libraries that log on their own (see above).
func (lf *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	l, err := newLogger(w, lf.level, lf.format)
	if err != nil {
		return nil, err
	}
	slog.SetDefault(l)
	redis.SetLogger(redisLogger{l.With("component", "redis")})
	return l, nil
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, flagenv.UsageError{Err: fmt.Errorf("invalid log level %q (debug, info, warn, error)", level)}
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case logText, "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case logJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, flagenv.UsageError{Err: fmt.Errorf("invalid log format %q (text, json)", format)}
}

// redisLogger is go-redis's logger (redis.SetLogger): its lines, such as
// "connection pool: failed to dial", become warnings.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.WarnContext(ctx, strings.TrimPrefix(strings.TrimSpace(fmt.Sprintf(format, v...)), "redis: "))
}

// stdLogger is a standard library logger that writes through l, for the
// APIs that take one (http.Server.ErrorLog).
func stdLogger(l *slog.Logger) *log.Logger {
	return slog.NewLogLogger(l.Handler(), slog.LevelWarn)
}

// reported is an error a role has already logged: Main does not print it
// again.
type reported struct{ err error }

func (r reported) Error() string { return r.err.Error() }
func (r reported) Unwrap() error { return r.err }

// logStop logs the error *err a role stops with, in the role's format, and
// marks it reported. Deferred once the logger exists.
func logStop(l *slog.Logger, err *error) {
	if *err == nil {
		return
	}
	l.Error("stopped", "err", *err)
	*err = reported{*err}
}
