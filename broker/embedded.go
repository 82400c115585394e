package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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

// Embedded is an in-process NATS server. It keeps the lifecycle contract
// (package internal/lifecycle): NewEmbedded, Start, Stop.
type Embedded struct {
	opts      *server.Options
	log       *slog.Logger
	listening bool

	mu      sync.Mutex
	srv     *server.Server // set by a successful Start
	started bool
	stopped bool
}

// StartEmbedded starts a NATS server with JetStream in this process and
// waits until it accepts connections: NewEmbedded, then Start.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	e, err := NewEmbedded(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), embeddedReadyTimeout)
	defer cancel()
	if err := e.Start(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// NewEmbedded checks cfg and returns the server, not started.
func NewEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
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
	return &Embedded{opts: opts, log: cfg.Logger.With("component", "nats-server"), listening: cfg.Port != 0}, nil
}

// Start starts the server and waits, until ctx ends, for it to accept
// connections with JetStream enabled. A server that cannot start (its
// port taken, its StoreDir unusable) fails at once with the server's
// reason, and is shut down before Start returns.
func (e *Embedded) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started || e.stopped {
		return errors.New("broker: embedded: already started or stopped")
	}
	e.started = true
	srv, err := server.NewServer(e.opts)
	if err != nil {
		return fmt.Errorf("broker: embedded: %w", err)
	}
	fatal := make(chan string, 1)
	srv.SetLoggerV2(&serverLogger{log: e.log, fatal: fatal}, false, false, false)
	srv.Start()
	if err := waitReady(ctx, srv, fatal); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return fmt.Errorf("broker: embedded: %w", err)
	}
	e.srv = srv
	return nil
}

// waitReady waits until srv accepts connections with JetStream, the server
// reports a fatal error, or ctx ends.
func waitReady(ctx context.Context, srv *server.Server, fatal <-chan string) error {
	for !srv.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-fatal:
			return errors.New(msg)
		case <-ctx.Done():
			return fmt.Errorf("server not ready: %w", context.Cause(ctx))
		default:
		}
	}
	if !srv.JetStreamEnabled() {
		return errors.New("JetStream did not start (see the server log)")
	}
	return nil
}

// Stop shuts the server down and waits until it has. It is idempotent and
// safe before Start and concurrently with itself.
func (e *Embedded) Stop(context.Context) error {
	e.mu.Lock()
	e.stopped = true
	srv := e.srv
	e.mu.Unlock()
	if srv != nil {
		srv.Shutdown() // at once when another Stop did it
		srv.WaitForShutdown()
	}
	return nil
}

// Shutdown is Stop.
func (e *Embedded) Shutdown() { _ = e.Stop(context.Background()) }

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

// serverLogger sends the NATS server's logs to slog, and its first fatal
// error to fatal, where Start looks for it.
type serverLogger struct {
	log   *slog.Logger
	fatal chan<- string
}

func (l *serverLogger) logf(level slog.Level, format string, v []any) {
	ctx := context.Background()
	if l.log.Enabled(ctx, level) {
		l.log.Log(ctx, level, fmt.Sprintf(format, v...))
	}
}

func (l *serverLogger) Noticef(format string, v ...any) { l.logf(slog.LevelDebug, format, v) }
func (l *serverLogger) Warnf(format string, v ...any)   { l.logf(slog.LevelDebug, format, v) }
func (l *serverLogger) Fatalf(format string, v ...any) {
	l.logf(slog.LevelError, format, v)
	select {
	case l.fatal <- fmt.Sprintf(format, v...):
	default:
	}
}
func (l *serverLogger) Errorf(format string, v ...any) { l.logf(slog.LevelError, format, v) }
func (l *serverLogger) Debugf(format string, v ...any) { l.logf(slog.LevelDebug, format, v) }
func (l *serverLogger) Tracef(format string, v ...any) { l.logf(slog.LevelDebug, format, v) }
