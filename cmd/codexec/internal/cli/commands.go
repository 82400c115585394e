package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/cmd/codexec/internal/flagenv"
	"github.com/codexec/codexec/frontend"
	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/internal/telemetry"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker"
	"github.com/nats-io/nats.go"
)

// defaultStopGrace is --stop-grace's default.
const defaultStopGrace = 30 * time.Second

// graceFlag registers --stop-grace.
func graceFlag(f *flagenv.Flags, p *time.Duration) {
	f.Duration(p, "stop-grace", "CODEXEC_STOP_GRACE", defaultStopGrace,
		"on SIGTERM or SIGINT, how long running jobs (worker) and open calls (frontend) get to finish; then they are cancelled, and a worker's jobs handed back to the queue")
}

// runDev runs everything in one process: embedded NATS with JetStream and
// the embedded state store under the data directory, one worker, and the
// MCP frontend on stdio (or HTTP).
func runDev(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	f := newFlags("dev", stderr)
	var dataDir string
	var lf logFlags
	var ff frontendFlags
	var wf workerFlags
	var grace time.Duration
	var metricsAddr string
	var metricsOn bool
	var otelEndpoint string
	f.String(&dataDir, "data-dir", "CODEXEC_DATA_DIR", defaultDataDir(), "where state, queued jobs, environments and scripts live")
	lf.register(f)
	graceFlag(f, &grace)
	metricsFlags(f, &metricsAddr, &metricsOn)
	tracingFlag(f, &otelEndpoint)
	ff.register(f, "")
	wf.register(f)
	if err := f.Parse(args); err != nil {
		return err
	}
	if err := wf.check(); err != nil {
		return err
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return err
	}
	defer logStop(log, &err)
	var access auth.Policy
	if ff.http != "" {
		if access, err = ff.access.policy(ctx, ff.http, log); err != nil {
			return err
		}
	}
	if ff.quotaTable, err = ff.quotas(log); err != nil {
		return err
	}
	warnUnboundedTenants(access, ff.quotaTable, log)
	if err := applyLegacyEnv(&wf); err != nil {
		return flagenv.UsageError{Err: err}
	}
	if dataDir, err = mkdirPrivate(dataDir); err != nil {
		return err
	}

	st, err := statestore.OpenBolt(filepath.Join(dataDir, "state.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	ns, err := broker.StartEmbedded(broker.EmbeddedConfig{StoreDir: filepath.Join(dataDir, "jetstream"), Logger: log.With("component", "nats")})
	if err != nil {
		return fmt.Errorf("embedded nats: %w", err)
	}
	defer ns.Shutdown()
	b, err := openBroker(ctx, broker.Config{ConnectOptions: []nats.Option{ns.ConnectOption()}, Name: "codexec-dev", Logger: log})
	if err != nil {
		return err
	}
	defer b.Close()

	wcfg := wf.config(dataDir, wire.DefaultPool, &ff, log.With("component", "worker"))
	wcfg.LocalWorkspaces = true // the one worker: its directories need no copy elsewhere
	w, err := worker.New(wcfg, b, st)
	if err != nil {
		return flagenv.UsageError{Err: err}
	}
	probe := telemetry.NewProbe(log)
	w.Watch(probe)
	stopMetrics, err := serveMetrics(metricsAddr, metricsOn, probe, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	stopTracing, err := startTracing(otelEndpoint, "dev", log)
	if err != nil {
		return err
	}
	defer stopTracing()
	if err := startWorker(ctx, w); err != nil {
		return err
	}
	defer stopWorker(w, grace, log)

	// Code files get a plain-file copy next to the scripts the worker keeps
	// (DATA_DIR/scripts, or --scripts-dir / CODE_STORAGE_DIR), so a local
	// user finds both under one directory.
	ff.filesMirror = wf.scriptsDir
	if ff.filesMirror == "" {
		ff.filesMirror = filepath.Join(dataDir, "scripts")
	}
	fcfg := ff.config(wire.DefaultPool, access, log.With("component", "frontend"))
	fcfg.Probe = probe
	fe, err := frontend.New(fcfg, b, st)
	if err != nil {
		return flagenv.UsageError{Err: err}
	}
	defer ff.collectEvery(ctx, st, log)()
	defer watchRevocations(ctx, fe, access)()
	log.Info("codexec dev ready", "data_dir", dataDir, "version", Version())
	return serveFrontend(ctx, fe, ff.http, stdin, stdout, log, grace)
}

// applyLegacyEnv honours the environment variables of the server codexec
// replaces: CODE_STORAGE_DIR, and ENV_TYPE with VENV_PATH / UV_VENV_PATH /
// CONDA_ENV_NAME. Explicit codexec settings win.
func applyLegacyEnv(wf *workerFlags) error {
	if d := os.Getenv("CODE_STORAGE_DIR"); d != "" && wf.scriptsDir == "" {
		wf.scriptsDir = d
	}
	if wf.venv != "" {
		return nil
	}
	switch t := os.Getenv("ENV_TYPE"); t {
	case "":
	case "venv":
		wf.venv = os.Getenv("VENV_PATH")
		if wf.venv == "" {
			return fmt.Errorf("ENV_TYPE=venv needs VENV_PATH")
		}
	case "venv-uv":
		wf.venv = os.Getenv("UV_VENV_PATH")
		if wf.venv == "" {
			return fmt.Errorf("ENV_TYPE=venv-uv needs UV_VENV_PATH")
		}
	case "conda":
		return fmt.Errorf("ENV_TYPE=conda (CONDA_ENV_NAME=%q) is not supported by this version yet; unset ENV_TYPE to use codexec's own default venv", os.Getenv("CONDA_ENV_NAME"))
	default:
		return fmt.Errorf("unknown ENV_TYPE %q (venv, venv-uv or conda)", t)
	}
	return nil
}

type clusterFlags struct {
	natsURL, redisURL, pool string
	log                     logFlags
	retention, ackWait      time.Duration
	grace                   time.Duration
	replicas                int
	metricsAddr             string
	metricsOn               bool
	otelEndpoint            string
	redis                   redisFlags
}

// redisFlags say how to reach a Redis that Sentinel manages, and how many
// replicas a write must reach.
type redisFlags struct {
	sentinels, master string
	wait              int
}

func (rf *redisFlags) register(f *flagenv.Flags) {
	f.String(&rf.sentinels, "redis-sentinel", "CODEXEC_REDIS_SENTINEL", "",
		"comma-separated host:port of Redis Sentinels: find the Redis primary through them and follow its failovers (the --redis URL then gives only the password, database and TLS)")
	f.String(&rf.master, "redis-master", "CODEXEC_REDIS_MASTER", "mymaster", "name under which the sentinels monitor the Redis primary")
	f.Int(&rf.wait, "redis-wait", "CODEXEC_REDIS_WAIT", 0,
		"replicas every write of code files and settings must reach before it is acknowledged (Redis WAIT), so that a failover cannot lose it; 0: no wait")
}

func (rf *redisFlags) options(url string) statestore.RedisOptions {
	return statestore.RedisOptions{URL: url, SentinelAddrs: commaList(rf.sentinels), MasterName: rf.master, WaitReplicas: rf.wait}
}

func (cf *clusterFlags) register(f *flagenv.Flags) {
	f.String(&cf.natsURL, "nats", "CODEXEC_NATS_URL", "nats://127.0.0.1:4222", "NATS server URL (JetStream enabled); for a cluster, the URLs of its servers, comma-separated")
	f.Int(&cf.replicas, "replicas", "CODEXEC_REPLICAS", broker.DefaultReplicas,
		"copies JetStream keeps of the job queue, results and blobs (3 on a three-node cluster; the same on every process of a cluster)")
	f.String(&cf.redisURL, "redis", "CODEXEC_REDIS_URL", "redis://127.0.0.1:6379/0", "Redis URL")
	cf.redis.register(f)
	f.String(&cf.pool, "pool", "CODEXEC_POOL", wire.DefaultPool, "worker pool")
	cf.log.register(f)
	graceFlag(f, &cf.grace)
	metricsFlags(f, &cf.metricsAddr, &cf.metricsOn)
	tracingFlag(f, &cf.otelEndpoint)
	f.Duration(&cf.retention, "retention", "CODEXEC_RETENTION", broker.DefaultRetention, "how long results are kept, addressable by job id")
	f.Duration(&cf.ackWait, "ack-wait", "CODEXEC_ACK_WAIT", broker.DefaultAckWait, "how long a job's lease lasts without a heartbeat before another worker gets it")
}

func (cf *clusterFlags) open(ctx context.Context, name string, log *slog.Logger) (*broker.Broker, statestore.Store, func(), error) {
	if !wire.ValidPool(cf.pool) {
		return nil, nil, nil, flagenv.UsageError{Err: fmt.Errorf("invalid pool %q: lower-case letters, digits, '-' and '_'", cf.pool)}
	}
	st, err := openRedis(ctx, cf.redis.options(cf.redisURL))
	if err != nil {
		return nil, nil, nil, err
	}
	b, err := openBroker(ctx, broker.Config{URL: cf.natsURL, Name: name, Retention: cf.retention, AckWait: cf.ackWait, Replicas: cf.replicas, Logger: log})
	if err != nil {
		st.Close()
		return nil, nil, nil, err
	}
	return b, st, func() { b.Close(); st.Close() }, nil
}

// runFrontend runs the MCP frontend of a cluster.
func runFrontend(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	f := newFlags("frontend", stderr)
	var cf clusterFlags
	var ff frontendFlags
	var stdio bool
	cf.register(f)
	ff.register(f, "127.0.0.1:8080")
	f.Bool(&stdio, "stdio", "CODEXEC_STDIO", false, "serve MCP on stdio instead of HTTP")
	if err := f.Parse(args); err != nil {
		return err
	}
	log, err := cf.log.logger(stderr)
	if err != nil {
		return err
	}
	defer logStop(log, &err)
	addr := ff.http
	if stdio {
		addr = ""
	}
	var access auth.Policy
	if addr != "" {
		if access, err = ff.access.policy(ctx, addr, log); err != nil {
			return err
		}
	}
	if ff.quotaTable, err = ff.quotas(log); err != nil {
		return err
	}
	warnUnboundedTenants(access, ff.quotaTable, log)
	b, st, closeAll, err := cf.open(ctx, "codexec-frontend", log)
	if err != nil {
		return err
	}
	defer closeAll()
	fcfg := ff.config(cf.pool, access, log)
	fcfg.Probe = telemetry.NewProbe(log)
	fe, err := frontend.New(fcfg, b, st)
	if err != nil {
		return flagenv.UsageError{Err: err}
	}
	stopMetrics, err := serveMetrics(cf.metricsAddr, cf.metricsOn, fcfg.Probe, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	stopTracing, err := startTracing(cf.otelEndpoint, "frontend", log)
	if err != nil {
		return err
	}
	defer stopTracing()
	defer ff.collectEvery(ctx, st, log)()
	defer watchRevocations(ctx, fe, access)()
	return serveFrontend(ctx, fe, addr, stdin, stdout, log, cf.grace)
}

// runWorker runs one worker of a cluster until a signal.
func runWorker(ctx context.Context, args []string, stderr io.Writer) (err error) {
	f := newFlags("worker", stderr)
	var cf clusterFlags
	var ff frontendFlags
	var wf workerFlags
	var dataDir string
	cf.register(f)
	f.String(&dataDir, "data-dir", "CODEXEC_DATA_DIR", defaultDataDir(), "where environments, session directories and scripts live")
	f.Duration(&ff.maxTimeout, "max-timeout", "CODEXEC_MAX_TIMEOUT", wire.DefaultMaxTimeout, "largest wall-clock limit of any job")
	f.Bytes(&ff.outputLimit, "output-limit", "CODEXEC_OUTPUT_LIMIT", worker.DefaultOutputLimit, "cap on stdout and on stderr of a job, each")
	f.Bool(&ff.allowURLReqs, "allow-url-requirements", "CODEXEC_ALLOW_URL_REQUIREMENTS", false, "accept 'name @ https://...' packages (set it on frontends and workers alike)")
	wf.register(f)
	if err := f.Parse(args); err != nil {
		return err
	}
	if err := wf.check(); err != nil {
		return err
	}
	log, err := cf.log.logger(stderr)
	if err != nil {
		return err
	}
	defer logStop(log, &err)
	if dataDir, err = mkdirPrivate(dataDir); err != nil {
		return err
	}
	b, st, closeAll, err := cf.open(ctx, "codexec-worker", log)
	if err != nil {
		return err
	}
	defer closeAll()
	w, err := worker.New(wf.config(dataDir, cf.pool, &ff, log), b, st)
	if err != nil {
		return flagenv.UsageError{Err: err}
	}
	probe := telemetry.NewProbe(log)
	w.Watch(probe)
	stopMetrics, err := serveMetrics(cf.metricsAddr, cf.metricsOn, probe, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	stopTracing, err := startTracing(cf.otelEndpoint, "worker", log)
	if err != nil {
		return err
	}
	defer stopTracing()
	if err := startWorker(ctx, w); err != nil {
		return err
	}
	<-ctx.Done()
	log.Info("stopping: finishing running jobs", "grace", cf.grace)
	stopWorker(w, cf.grace, log)
	return nil
}
