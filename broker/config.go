package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// Defaults applied by Config.WithDefaults.
const (
	DefaultRetention  = 24 * time.Hour
	DefaultAckWait    = 6 * time.Second
	DefaultMaxDeliver = 5
	DefaultReplicas   = 1
)

// MaxJobBytes is the largest encoded job PublishJob accepts, code included.
// Anything larger fails with wire.ErrPayloadTooLarge before touching NATS.
const MaxJobBytes = 64 << 20

// Config configures a Broker. The zero value plus a URL (or an in-process
// ConnectOption) is usable; WithDefaults fills every unset field.
type Config struct {
	// URL is the NATS URL (comma-separated for a cluster). Default
	// nats.DefaultURL. Ignored when ConnectOptions include an in-process
	// server (nats.InProcessServer, Embedded.ConnectOption).
	URL string
	// ConnectOptions are extra NATS options: credentials, TLS, an in-process
	// server. They are applied after the broker's own (name, retry on failed
	// connect, unlimited reconnects, log handlers), so they override them.
	ConnectOptions []nats.Option
	// Name is the connection name shown by the server, e.g.
	// "codexec-worker-<id>". Default none.
	Name string
	// Retention is how long results and blobs are kept (the TTL of the
	// results bucket and of the blobs object store). Default 24h. Jobs have
	// no age limit: they stay queued until a worker takes them.
	Retention time.Duration
	// AckWait is how long the server waits for a delivered job to be
	// acknowledged before redelivering it. Default 6s. A consumer sends
	// InProgress every AckWait/3 while a handler runs, so AckWait bounds how
	// long a dead worker holds a job, not how long a job may run. It is
	// short because a redelivery does not start a job whose first attempt
	// is still alive (see the worker's claims): a lapse of the lease during
	// a NATS outage costs a wait, not a second run.
	AckWait time.Duration
	// MaxDeliver is how many times a job is delivered before the server gives
	// up on it. Default 5; -1 means no limit.
	MaxDeliver int
	// Replicas is the replica count of the jobs stream, the results bucket
	// and the blobs store. Default 1; use 3 on a clustered JetStream.
	Replicas int
	// Logger receives the broker's logs. Default slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with every unset field at its default.
func (c Config) WithDefaults() Config {
	if c.URL == "" {
		c.URL = nats.DefaultURL
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultMaxDeliver
	}
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate checks a Config that WithDefaults has filled.
func (c Config) validate() error {
	var errs []error
	if c.Retention < 0 {
		errs = append(errs, fmt.Errorf("retention %s is negative", c.Retention))
	}
	// InProgress is sent every AckWait/3; the server counts AckWait in
	// whole milliseconds at best, so anything shorter makes no sense.
	if c.AckWait < 30*time.Millisecond {
		errs = append(errs, fmt.Errorf("ack wait %s is shorter than 30ms", c.AckWait))
	}
	if c.MaxDeliver < -1 {
		errs = append(errs, fmt.Errorf("max deliver %d is invalid (-1 means unlimited)", c.MaxDeliver))
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas %d is not between 1 and 5", c.Replicas))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("broker: invalid config: %w", err)
	}
	return nil
}
