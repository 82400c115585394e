// Package telemetry holds codexec's Prometheus metrics and the health
// endpoints every role serves: /metrics, /healthz (liveness) and /readyz
// (readiness). The metrics are defined here, once, and fed by one-line
// hooks in the roles (frontend, worker) and the parts they are built from
// (envcache, worker/runner); what is read rather than counted (queue depth,
// warm interpreters alive, the state of NATS and Redis) is read at scrape
// time through a Probe.
//
// Label values are bounded: every label of a metric takes at most
// maxLabelValues distinct values (tenants: MaxTenants), the rest are folded
// into "other", so that nothing a caller sends can grow the series without
// bound. No job id, scope or code is ever a label.
//
// It imports nothing of codexec's, so that every package may feed it.
package telemetry

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Registry holds the process-wide metrics (below) and the Go runtime's and
// the process's own (memory, CPU, descriptors). A Probe serves it together
// with its own collectors.
var Registry = prometheus.NewRegistry()

// latencyBuckets span a forked print(1) (a few milliseconds) to the
// longest job (ten minutes).
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// buildBuckets span an environment found on disk to a large conda build.
var buildBuckets = []float64{.1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600}

// The metrics. Their names follow Prometheus' conventions: the codexec_
// prefix, _total for counters, base units (_seconds).
var (
	workerJobs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "codexec_worker_jobs_total",
		Help: "Jobs a worker finished, by kind, status (ok, error, timeout, limit, rejected, internal, expired, cancelled) and the limit hit (none when none).",
	}, []string{"kind", "status", "limit"})
	jobsRunning = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "codexec_worker_jobs_running",
		Help: "Jobs running on the worker now, by the worker's pool.",
	}, []string{"pool"})
	queueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "codexec_job_queue_wait_seconds",
		Help:    "From a job's publication by the frontend to a worker starting it (the frontend's clock against the worker's).",
		Buckets: latencyBuckets,
	}, []string{"kind"})
	runTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "codexec_job_run_seconds",
		Help:    "A job's time on the worker, from its start to its result being ready (set-up, environment, run).",
		Buckets: latencyBuckets,
	}, []string{"kind"})
	endToEnd = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "codexec_job_end_to_end_seconds",
		Help:    "From the frontend building a job to its result reaching the frontend, by kind and status (no_result when none came).",
		Buckets: latencyBuckets,
	}, []string{"kind", "status"})
	frontendJobs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "codexec_frontend_jobs_total",
		Help: "Jobs whose wait for a result ended on the frontend, by kind and status (no_result when none came).",
	}, []string{"kind", "status"})
	tenantJobs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "codexec_tenant_jobs_total",
		Help: "Jobs of each tenant (callers with credentials) whose result came back; tenants beyond the first 100 seen count as other.",
	}, []string{"tenant"})
	tenantRun = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "codexec_tenant_run_seconds_total",
		Help: "Run time of the code of each tenant's jobs, as the worker measured it.",
	}, []string{"tenant"})

	envsBuilt = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "codexec_envs_built_total",
		Help: "Environments this worker built for a job.",
	})
	envsCached = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "codexec_envs_cached_total",
		Help: "Jobs whose environment was ready in the worker's cache.",
	})
	envsFailed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "codexec_envs_failed_total",
		Help: "Environments that could not be made for a job (build failed, or a remembered failure).",
	})
	envsEvicted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "codexec_envs_evicted_total",
		Help: "Environments evicted from the cache to keep it within its disk budget.",
	})
	envBuildTime = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "codexec_env_build_seconds",
		Help:    "Time a job waited for its environment to be built.",
		Buckets: buildBuckets,
	})

	zygotesStarted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "codexec_zygotes_started_total",
		Help: "Warm interpreters that started and became ready.",
	})
	zygotesFailed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "codexec_zygote_start_failures_total",
		Help: "Warm interpreters that failed to start (their jobs run in a fresh interpreter).",
	})
	zygotesReplaced = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "codexec_zygotes_replaced_total",
		Help: "Warm interpreters that died while ready and are replaced on next use.",
	})
	sandboxFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "codexec_sandbox_setup_failures_total",
		Help: "Jobs whose sandbox could not be set up, by stage (session, limits, start).",
	}, []string{"stage"})
)

func init() {
	Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	Registry.MustRegister(ours...)
}

// ours are codexec's own collectors of the Registry.
var ours = []prometheus.Collector{
	workerJobs, jobsRunning, queueWait, runTime, endToEnd, frontendJobs, tenantJobs, tenantRun,
	envsBuilt, envsCached, envsFailed, envsEvicted, envBuildTime,
	zygotesStarted, zygotesFailed, zygotesReplaced, sandboxFailures,
}

// off, when set, makes every hook below return at once: the counters and
// histograms stay at zero, while what is read at scrape time (readiness,
// queue depth) and the process's own metrics are still served.
var off atomic.Bool

// SetEnabled turns the hooks on (the default) or off, for the whole
// process: --metrics=false, and the benchmark of what metrics cost.
func SetEnabled(on bool) { off.Store(!on) }

// Bounded label values, per metric and label.
var (
	kinds     = newFold(maxLabelValues)
	statuses  = newFold(maxLabelValues)
	limitsHit = newFold(maxLabelValues)
	stages    = newFold(maxLabelValues)
	pools     = newFold(maxLabelValues)
	tenants   = newFold(MaxTenants)
)

// JobStarted counts a job running on a worker of pool until the returned
// function is called.
func JobStarted(pool string) (done func()) {
	if off.Load() {
		return func() {}
	}
	g := jobsRunning.WithLabelValues(pools.value(pool))
	g.Inc()
	return g.Dec
}

// JobFinished records a job a worker finished: its kind, status and the
// limit it hit ("" for none), how long it waited in the queue (from its
// publication, enqueued, to started) and how long it took on the worker.
func JobFinished(kind, status, limit string, enqueued, started time.Time, took time.Duration) {
	if off.Load() {
		return
	}
	if limit == "" {
		limit = "none"
	}
	k := kinds.value(kind)
	workerJobs.WithLabelValues(k, statuses.value(status), limitsHit.value(limit)).Inc()
	if !enqueued.IsZero() {
		queueWait.WithLabelValues(k).Observe(max(started.Sub(enqueued), 0).Seconds())
	}
	runTime.WithLabelValues(k).Observe(took.Seconds())
}

// CallFinished records, on the frontend, the end of the wait for a job's
// result: its kind, its status ("" when no result came: no_result), the
// time since the job was built (enqueued), and the caller's tenant ("" for
// none) with the run time of its code.
func CallFinished(kind, status, tenant string, enqueued time.Time, run time.Duration) {
	if off.Load() {
		return
	}
	if status == "" {
		status = "no_result"
	}
	k, s := kinds.value(kind), statuses.value(status)
	frontendJobs.WithLabelValues(k, s).Inc()
	endToEnd.WithLabelValues(k, s).Observe(time.Since(enqueued).Seconds())
	if tenant != "" && status != "no_result" {
		t := tenants.value(tenant)
		tenantJobs.WithLabelValues(t).Inc()
		tenantRun.WithLabelValues(t).Add(run.Seconds())
	}
}

// EnvReady records how a job's environment was had: built (taking took),
// found in the cache, or failed.
func EnvReady(built bool, took time.Duration, err error) {
	if off.Load() {
		return
	}
	switch {
	case err != nil:
		envsFailed.Inc()
	case built:
		envsBuilt.Inc()
		envBuildTime.Observe(took.Seconds())
	default:
		envsCached.Inc()
	}
}

// EnvEvicted counts an environment evicted from the cache.
func EnvEvicted() { count(envsEvicted) }

// ZygoteStarted counts a warm interpreter that became ready.
func ZygoteStarted() { count(zygotesStarted) }

// ZygoteFailed counts a warm interpreter that failed to start.
func ZygoteFailed() { count(zygotesFailed) }

// ZygoteReplaced counts a ready warm interpreter that died.
func ZygoteReplaced() { count(zygotesReplaced) }

// SandboxFailed counts a job whose sandbox failed at stage.
func SandboxFailed(stage string) {
	if !off.Load() {
		sandboxFailures.WithLabelValues(stages.value(stage)).Inc()
	}
}

func count(c prometheus.Counter) {
	if !off.Load() {
		c.Inc()
	}
}
