package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"

	"github.com/codexec/codexec/cmd/codexec/internal/flagenv"
	"github.com/codexec/codexec/cmd/codexec/internal/status"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
)

// statusReadTimeout bounds one read of the cluster, so that a server that
// does not answer shows as an error in --watch instead of freezing it.
const statusReadTimeout = 5 * time.Second

// runStatus prints the cluster at a glance (package status), once or, with
// --watch, until a signal.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("status", stderr)
	var natsURL, redisURL, pool string
	var rf redisFlags
	var watch, asJSON bool
	var interval time.Duration
	f.String(&natsURL, "nats", "CODEXEC_NATS_URL", "nats://127.0.0.1:4222", "NATS server URL (JetStream enabled); for a cluster, the URLs of its servers, comma-separated")
	f.String(&redisURL, "redis", "CODEXEC_REDIS_URL", "redis://127.0.0.1:6379/0", "Redis URL")
	rf.register(f)
	f.String(&pool, "pool", "CODEXEC_STATUS_POOL", "", "show this pool only (default: every pool)")
	f.Bool(&watch, "watch", "CODEXEC_STATUS_WATCH", false, "refresh every --interval until interrupted: in place on a terminal, one block (or JSON line) per refresh otherwise")
	f.Bool(&asJSON, "json", "CODEXEC_STATUS_JSON", false, "write JSON (one object per refresh) instead of tables")
	f.Duration(&interval, "interval", "CODEXEC_STATUS_INTERVAL", time.Second, "time between two reads; the rates (jobs per second) are measured over it")
	if err := f.Parse(args); err != nil {
		return err
	}
	if interval <= 0 {
		return flagenv.UsageError{Err: errors.New("--interval must be positive")}
	}
	if pool != "" && !wire.ValidPool(pool) {
		return flagenv.UsageError{Err: fmt.Errorf("invalid pool %q: lower-case letters, digits, '-' and '_'", pool)}
	}
	src, closeAll, err := openStatusSources(ctx, natsURL, rf.options(redisURL))
	if err != nil {
		return err
	}
	defer closeAll()
	src.Pool = pool
	read := func(ctx context.Context) (status.Snapshot, error) {
		ctx, cancel := context.WithTimeout(ctx, statusReadTimeout)
		defer cancel()
		return status.Read(ctx, src)
	}
	opt := status.Options{JSON: asJSON, Terminal: isTerminal(stdout), Interval: interval}
	if !watch {
		return status.Show(ctx, stdout, read, opt)
	}
	err = status.Watch(ctx, stdout, read, opt)
	if ctx.Err() != nil {
		return nil // interrupted: the way --watch ends
	}
	return err
}

// openStatusSources connects to NATS and Redis, read-only: it defines
// nothing in JetStream.
func openStatusSources(ctx context.Context, natsURL string, ro statestore.RedisOptions) (status.Sources, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := statestore.NewRedis(ctx, ro)
	if err != nil {
		return status.Sources{}, nil, fmt.Errorf("redis at %s: %w", redactURL(ro.URL), err)
	}
	nc, err := nats.Connect(natsURL, nats.Name("codexec-status"), nats.MaxReconnects(-1))
	if err != nil {
		st.Close()
		return status.Sources{}, nil, fmt.Errorf("nats at %s: %w", redactURL(natsURL), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		st.Close()
		return status.Sources{}, nil, fmt.Errorf("nats at %s: %w", redactURL(natsURL), err)
	}
	return status.Sources{JetStream: js, Store: st}, func() { nc.Close(); st.Close() }, nil
}

// isTerminal says whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
