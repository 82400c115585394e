package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// DefaultEmbeddedMaxPayload is the max payload of an embedded server unless
// EmbeddedConfig says otherwise.
const DefaultEmbeddedMaxPayload = 8 << 20

// embeddedReadyTimeout bounds StartEmbedded's wait for the server.
const embeddedReadyTimeout = 30 * time.Second

// EmbeddedConfig configures an in-process NATS server with JetStream, used
// by `codexec dev` and by tests.
type EmbeddedConfig struct {
	// StoreDir is the JetStream file storage directory. Required; jobs,
	// results and blobs survive a restart on the same directory.
	StoreDir string
	// Host is the interface the TCP listener binds to. Default "127.0.0.1".
	Host string
	// Port is the TCP client port: 0 means no listener at all (clients can
	// only connect in-process, through ConnectOption); -1 picks a random
	// free port (see ClientURL).
	Port int
	// MaxPayload is the largest message the server accepts. Default 8 MiB.
	MaxPayload int32
	// Logger receives the server's logs: notices, warnings and debug lines at
	// debug level, errors at error level. Nothing goes to stdout or stderr.
	// Default slog.Default().
	Logger *slog.Logger
}

// Embedded is a running in-process NATS server.
type Embedded struct {
	srv       *server.Server
	listening bool
}

// StartEmbedded starts a NATS server with JetStream in this process and
// waits until it accepts connections.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("broker: embedded: StoreDir is required")
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = DefaultEmbeddedMaxPayload
	}
	if cfg.MaxPayload < 0 {
		return nil, fmt.Errorf("broker: embedded: max payload %d is negative", cfg.MaxPayload)
	}
	if cfg.Port < -1 {
		return nil, fmt.Errorf("broker: embedded: invalid port %d", cfg.Port)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	opts := &server.Options{
		ServerName: "codexec-embedded",
		Host:       cfg.Host,
		Port:       cfg.Port,
		DontListen: cfg.Port == 0,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		MaxPayload: cfg.MaxPayload,
		NoSigs:     true,
		NoLog:      true,
	}
	if cfg.Port == 0 {
		opts.Port = server.RANDOM_PORT // unused: nothing listens
	}
	if p := int64(cfg.MaxPayload) * 2; p > server.MAX_PENDING_SIZE {
		opts.MaxPending = p
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("broker: embedded: %w", err)
	}
	srv.SetLoggerV2(&serverLogger{log: cfg.Logger.With("component", "nats-server")}, false, false, false)
	srv.Start()
	if !srv.ReadyForConnections(embeddedReadyTimeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("broker: embedded: server not ready after %s", embeddedReadyTimeout)
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, errors.New("broker: embedded: JetStream did not start (see the server log)")
	}
	return &Embedded{srv: srv, listening: cfg.Port != 0}, nil
}

// ConnectOption is the nats.Option that connects a client to this server
// in-process, without TCP. Put it in Config.ConnectOptions.
func (e *Embedded) ConnectOption() nats.Option { return nats.InProcessServer(e.srv) }

// ClientURL is the server's TCP URL, "" when it does not listen.
func (e *Embedded) ClientURL() string {
	if !e.listening {
		return ""
	}
	return e.srv.ClientURL()
}

// Shutdown stops the server and waits until it has.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// serverLogger sends the NATS server's logs to slog.
type serverLogger struct{ log *slog.Logger }

func (l *serverLogger) logf(level slog.Level, format string, v []any) {
	ctx := context.Background()
	if l.log.Enabled(ctx, level) {
		l.log.Log(ctx, level, fmt.Sprintf(format, v...))
	}
}

func (l *serverLogger) Noticef(format string, v ...any) { l.logf(slog.LevelDebug, format, v) }
func (l *serverLogger) Warnf(format string, v ...any)   { l.logf(slog.LevelDebug, format, v) }
func (l *serverLogger) Fatalf(format string, v ...any)  { l.logf(slog.LevelError, format, v) }
func (l *serverLogger) Errorf(format string, v ...any)  { l.logf(slog.LevelError, format, v) }
func (l *serverLogger) Debugf(format string, v ...any)  { l.logf(slog.LevelDebug, format, v) }
func (l *serverLogger) Tracef(format string, v ...any)  { l.logf(slog.LevelDebug, format, v) }
