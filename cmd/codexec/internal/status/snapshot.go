package status

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
)

// Snapshot is the cluster as read at one moment.
type Snapshot struct {
	At      time.Time `json:"at"`
	Workers []Worker  `json:"workers"`
	Pools   []Pool    `json:"pools"`
	// Published counts the messages ever stored in the jobs stream (its
	// last sequence): jobs, plus a few markers of the stream's own.
	Published uint64 `json:"published"`
	// PublishedPerSec is Published's rate since the previous snapshot
	// (Rates); absent on the first.
	PublishedPerSec *float64 `json:"published_per_sec,omitempty"`
	// NoStream says the jobs stream does not exist yet (no frontend or
	// worker has connected to this NATS).
	NoStream bool `json:"no_stream,omitempty"`
	// consumers holds each consumer's pool and delivery counter, for Rates.
	consumers map[string]consumerCount
}

type consumerCount struct {
	pool      string
	delivered uint64
}

// Worker is one live worker, from its presence record.
type Worker struct {
	ID          string            `json:"id"`
	Pool        string            `json:"pool"`
	Host        string            `json:"host,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Load        int               `json:"load"`
	Concurrency int               `json:"concurrency"`
	Warm        int               `json:"warm"`
	Envs        []string          `json:"envs"`
	Python      string            `json:"python,omitempty"`
	StartedAt   time.Time         `json:"started_at"`
	Version     int               `json:"wire_version"`
	// GPUs are the devices it offers (Busy as of its record), GPUWaiting
	// its jobs waiting for one.
	GPUs       []envspec.GPU `json:"gpus,omitempty"`
	GPUWaiting int           `json:"gpu_waiting,omitempty"`
}

// Pool is one pool's queue and workers.
type Pool struct {
	Name string `json:"name"`
	// Workers counts the pool's live workers; Slots adds up their
	// concurrency and Load their running jobs.
	Workers int `json:"workers"`
	Slots   int `json:"slots"`
	Load    int `json:"load"`
	// Queued counts the jobs waiting for a worker (the consumers'
	// NumPending), InFlight those handed to a worker and not yet
	// acknowledged (NumAckPending: running, or their worker died and the
	// lease has not lapsed yet).
	Queued   uint64 `json:"queued"`
	InFlight int    `json:"in_flight"`
	// Delivered counts the jobs the pool's consumers ever handed out
	// (redeliveries included); JobsPerSec is its rate since the previous
	// snapshot (Rates), absent on the first.
	Delivered  uint64   `json:"delivered"`
	JobsPerSec *float64 `json:"jobs_per_sec,omitempty"`
}

// Sources is where a snapshot is read from.
type Sources struct {
	JetStream jetstream.JetStream
	Store     statestore.Store
	// Keys is the state store's key layout (statestore.DefaultPrefix when
	// its Prefix is empty).
	Keys statestore.Keys
	// Pool, when set, keeps that pool only.
	Pool string
}

// Read takes a snapshot of the cluster.
func Read(ctx context.Context, src Sources) (Snapshot, error) {
	keys := src.Keys
	if keys.Prefix == "" {
		keys.Prefix = statestore.DefaultPrefix
	}
	snap := Snapshot{At: time.Now().UTC(), consumers: map[string]consumerCount{}}
	members, err := src.Store.Members(ctx, keys.Workers())
	if err != nil {
		return snap, fmt.Errorf("worker presence: %w", err)
	}
	for _, a := range envspec.DecodeAdverts(members) {
		if src.Pool == "" || a.Pool == src.Pool {
			snap.Workers = append(snap.Workers, workerOf(a))
		}
	}
	pools := map[string]*Pool{}
	pool := func(name string) *Pool {
		if pools[name] == nil {
			pools[name] = &Pool{Name: name}
		}
		return pools[name]
	}
	for _, w := range snap.Workers {
		p := pool(w.Pool)
		p.Workers++
		p.Slots += w.Concurrency
		p.Load += w.Load
	}
	if err := readQueues(ctx, src.JetStream, &snap, func(name string) *Pool {
		if src.Pool != "" && name != src.Pool {
			return nil
		}
		return pool(name)
	}); err != nil {
		return snap, err
	}
	for _, p := range pools {
		snap.Pools = append(snap.Pools, *p)
	}
	slices.SortFunc(snap.Pools, func(a, b Pool) int { return cmp.Compare(a.Name, b.Name) })
	return snap, nil
}

func workerOf(a envspec.Advert) Worker {
	return Worker{
		ID: a.WorkerID, Pool: a.Pool, Host: a.Host, Labels: a.Capabilities.Labels, Load: a.Load,
		Concurrency: a.Concurrency, Warm: a.Warm, Envs: append([]string{}, a.Envs...), Python: a.Python,
		StartedAt: a.StartedAt, Version: a.V,
		GPUs: a.GPUs, GPUWaiting: a.GPUWaiting,
	}
}

// readQueues reads the jobs stream's last sequence and each of its
// consumers' state into snap, adding each consumer's counts to the pool
// that pool(name) returns (nil: left out).
func readQueues(ctx context.Context, js jetstream.JetStream, snap *Snapshot, pool func(string) *Pool) error {
	stream, err := js.Stream(ctx, wire.JobsStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		snap.NoStream = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("jobs stream %s: %w", wire.JobsStream, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("jobs stream %s: %w", wire.JobsStream, err)
	}
	snap.Published = info.State.LastSeq
	lister := stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		name, ok := poolOfSubject(ci.Config.FilterSubject)
		if !ok {
			continue
		}
		p := pool(name)
		if p == nil {
			continue
		}
		p.Queued += ci.NumPending
		p.InFlight += ci.NumAckPending
		p.Delivered += ci.Delivered.Consumer
		snap.consumers[ci.Name] = consumerCount{pool: name, delivered: ci.Delivered.Consumer}
	}
	if err := lister.Err(); err != nil {
		return fmt.Errorf("consumers of %s: %w", wire.JobsStream, err)
	}
	return nil
}

// poolOfSubject returns the pool of a consumer's filter subject: the
// pool's own (wire.JobSubject) or one of its workers' (wire.WorkerSubject).
func poolOfSubject(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, wire.JobsSubjectPre)
	if !ok {
		return "", false
	}
	name, _, _ := strings.Cut(rest, ".")
	if !wire.ValidPool(name) {
		return "", false
	}
	return name, true
}

// Rates fills cur's rates from prev, an earlier snapshot of the same
// cluster. A consumer's counter that is not in both, or went down (the
// consumer was deleted and made again), adds nothing.
func Rates(prev, cur *Snapshot) {
	dt := cur.At.Sub(prev.At).Seconds()
	if dt <= 0 {
		return
	}
	if cur.Published >= prev.Published && !prev.NoStream {
		r := float64(cur.Published-prev.Published) / dt
		cur.PublishedPerSec = &r
	}
	perPool := map[string]uint64{}
	for name, c := range cur.consumers {
		if before, ok := prev.consumers[name]; ok && c.delivered >= before.delivered {
			perPool[c.pool] += c.delivered - before.delivered
		}
	}
	for i := range cur.Pools {
		r := float64(perPool[cur.Pools[i].Name]) / dt
		cur.Pools[i].JobsPerSec = &r
	}
}
