package broker

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/codexec/codexec/wire"
)

// headerRoom is what PublishJob and PutResult leave free in a message of the
// server's max payload for headers (Nats-Msg-Id, KV and JetStream headers).
const headerRoom = 8 << 10

// jobsSubjects is the subject filter of the jobs stream.
const jobsSubjects = wire.JobsSubjectPre + ">"

// pingTimeout bounds Ping when its context has no deadline.
const pingTimeout = 10 * time.Second

// DuplicateWindow is how long the jobs stream remembers Nats-Msg-Id values:
// a job published again under the same message id within it is stored
// once. A publisher that retries a job must stop retrying within it (the
// frontend retries for at most DuplicateWindow less a publish attempt).
const DuplicateWindow = 2 * time.Minute

// ErrNotConnected is returned, wrapped, by PublishJob and PutJobRecord while
// the connection to NATS is down: nothing was sent, rather than the message
// waiting in the client's reconnect buffer to be sent, unacknowledged, at
// some later reconnect.
var ErrNotConnected = errors.New("broker: not connected to NATS")

// idRe accepts job ids that are safe as a KV key, an object name and a
// Nats-Msg-Id. ULIDs always match.
var idRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// jobBlobName and resultBlobName build object names; nothing else does.
func jobBlobName(jobID string) string { return "job-" + jobID }

// resultBlobName adds a random suffix so that two workers racing to store
// a large result for the same job never overwrite each other's blob: only
// the stub that wins the create-only KV write points at its blob.
func resultBlobName(jobID string) string { return "result-" + jobID + "-" + rand.Text() }

// Broker is a connection to NATS JetStream with the codexec stream, results
// bucket and blobs store opened. It is safe for concurrent use.
type Broker struct {
	// blobReads bounds the result blobs read at once (maxBlobReads).
	blobReads chan struct{}
	cfg       Config
	log       *slog.Logger
	nc        *nats.Conn
	js        jetstream.JetStream
	results   jetstream.KeyValue
	claims    jetstream.KeyValue // see claims.go
	jobs      jetstream.Stream
	blobs     jetstream.ObjectStore
	ws        workspaceStore // sessions' working directories (workspaces.go)

	published atomic.Uint64 // jobs published through this broker, for the anchor
	anchoring atomic.Bool   // an anchor renewal is running

	closedCh    chan nats.Status // CLOSED events of nc
	watchDone   chan struct{}
	closeOnce   sync.Once
	mu          sync.Mutex
	closed      bool
	consumers   map[*Consumer]struct{}
	waitingHook func(jobID string) // see export_test.go
}

// Open connects to NATS and creates or updates the jobs stream, the results
// bucket and the blobs object store (see the package documentation for
// their layout).
//
// The connection retries a failed first connect and reconnects forever;
// Open waits for the first connection until ctx ends. Creating the stream,
// bucket and store needs JetStream API permissions; every process may call
// Open, the definitions are idempotent.
func Open(ctx context.Context, cfg Config) (*Broker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "broker")
	opts := []nats.Option{
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			attrs := []any{"err", err}
			if sub != nil {
				attrs = append(attrs, "subject", sub.Subject)
			}
			log.Error("nats async error", attrs...)
		}),
	}
	if cfg.Name != "" {
		opts = append(opts, nats.Name(cfg.Name))
	}
	opts = append(opts, cfg.ConnectOptions...)
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("broker: connect: %w", err)
	}
	b := &Broker{
		cfg:       cfg,
		log:       log,
		nc:        nc,
		closedCh:  nc.StatusChanged(nats.CLOSED),
		watchDone: make(chan struct{}),
		consumers: make(map[*Consumer]struct{}),
		blobReads: make(chan struct{}, maxBlobReads),
	}
	go b.watchClosed()
	if err := b.setup(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *Broker) setup(ctx context.Context) error {
	if err := waitConnected(ctx, b.nc); err != nil {
		return err
	}
	// SubmitJob's acknowledgements that never come (the server went away)
	// must not pile up in the client: they end after as long as a
	// synchronous publish waits.
	js, err := jetstream.New(b.nc, jetstream.WithPublishAsyncTimeout(publishAttemptTimeout))
	if err != nil {
		return fmt.Errorf("broker: jetstream: %w", err)
	}
	b.js = js
	maxPayload := b.nc.MaxPayload()
	b.jobs, err = js.CreateOrUpdateStream(ctx, b.streamConfig(jetstream.StreamConfig{
		Name:        wire.JobsStream,
		Description: "codexec jobs, one subject per worker pool",
		Subjects:    []string{jobsSubjects},
		Retention:   jetstream.WorkQueuePolicy,
		Duplicates:  DuplicateWindow,
		MaxMsgSize:  int32(min(maxPayload, 1<<31-1)),
	}))
	if err != nil {
		return fmt.Errorf("broker: create stream %s: %w", wire.JobsStream, err)
	}
	if err := b.renewAnchor(ctx); err != nil {
		b.log.Debug("jobs stream anchor", "err", err)
	}
	b.results, err = js.CreateOrUpdateKeyValue(ctx, b.keyValueConfig(jetstream.KeyValueConfig{
		Bucket:      wire.ResultsBucket,
		Description: "codexec results by job id",
		History:     1,
		TTL:         b.cfg.Retention,
		RePublish:   resultsRepublish,
	}))
	if err != nil {
		return fmt.Errorf("broker: create bucket %s: %w", wire.ResultsBucket, err)
	}
	if err := b.createClaims(ctx); err != nil {
		return err
	}
	b.blobs, err = js.CreateOrUpdateObjectStore(ctx, b.objectStoreConfig(jetstream.ObjectStoreConfig{
		Bucket:      wire.BlobsBucket,
		Description: "codexec job code and results too large for one message",
		TTL:         b.cfg.Retention,
	}))
	if err != nil {
		return fmt.Errorf("broker: create object store %s: %w", wire.BlobsBucket, err)
	}
	return nil
}

// streamConfig, keyValueConfig and objectStoreConfig give a stream, a
// key-value bucket or an object store of the broker what all of them share:
// file storage and Config.Replicas copies. Define every new one through
// them, so that a clustered deployment replicates it too.
func (b *Broker) streamConfig(c jetstream.StreamConfig) jetstream.StreamConfig {
	c.Storage, c.Replicas = jetstream.FileStorage, b.cfg.Replicas
	return c
}

func (b *Broker) keyValueConfig(c jetstream.KeyValueConfig) jetstream.KeyValueConfig {
	c.Storage, c.Replicas = jetstream.FileStorage, b.cfg.Replicas
	return c
}

func (b *Broker) objectStoreConfig(c jetstream.ObjectStoreConfig) jetstream.ObjectStoreConfig {
	c.Storage, c.Replicas = jetstream.FileStorage, b.cfg.Replicas
	return c
}

// waitConnected blocks until nc is connected, closed, or ctx ends.
func waitConnected(ctx context.Context, nc *nats.Conn) error {
	ch := nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	defer nc.RemoveStatusListener(ch)
	for !nc.IsConnected() {
		if nc.IsClosed() {
			return fmt.Errorf("broker: connect: %w", nats.ErrConnectionClosed)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			err := nc.LastError()
			if err == nil {
				err = ctx.Err()
			}
			return fmt.Errorf("broker: connect: %w", errors.Join(ctx.Err(), err))
		}
	}
	return nil
}

// watchClosed stops every consumer when the connection closes under them,
// whoever closed it: their handlers' contexts are cancelled, and their jobs
// come back after AckWait.
func (b *Broker) watchClosed() {
	defer close(b.watchDone)
	for st := range b.closedCh {
		if st == nats.CLOSED {
			for _, c := range b.takeConsumers() {
				c.abort(false)
			}
			return
		}
	}
}

// takeConsumers marks the broker closed and returns its live consumers.
func (b *Broker) takeConsumers() []*Consumer {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	cs := make([]*Consumer, 0, len(b.consumers))
	for c := range b.consumers {
		cs = append(cs, c)
	}
	return cs
}

// Close stops every consumer at once, as Stop with an expired context would
// (handlers' contexts are cancelled and their jobs Nak'd for immediate
// redelivery elsewhere), flushes and closes the connection. It does not wait
// for handlers to return; Consumer.Done does. Close is idempotent.
func (b *Broker) Close() {
	b.closeOnce.Do(func() {
		cs := b.takeConsumers()
		for _, c := range cs {
			c.abort(true)
		}
		for _, c := range cs {
			<-c.loopDone
		}
		if b.nc.IsConnected() {
			_ = b.nc.FlushTimeout(time.Second)
		}
		b.nc.Close()
		b.nc.RemoveStatusListener(b.closedCh)
		<-b.watchDone
	})
}

// Closed is closed once the broker's connection is closed, by Close or
// under it: nothing the broker does succeeds after that.
func (b *Broker) Closed() <-chan struct{} { return b.watchDone }

// Conn returns the underlying NATS connection, for health checks and for
// packages that publish plain NATS messages (progress, presence).
func (b *Broker) Conn() *nats.Conn { return b.nc }

// Ping checks that the server answers and that the jobs stream exists.
// Without a deadline in ctx it gives up after 10s.
func (b *Broker) Ping(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pingTimeout)
		defer cancel()
	}
	if err := b.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("broker: ping: %w", err)
	}
	if _, err := b.js.Stream(ctx, wire.JobsStream); err != nil {
		return fmt.Errorf("broker: ping: stream %s: %w", wire.JobsStream, err)
	}
	return nil
}

// messageLimit is the largest body PublishJob and PutResult put in one message.
func (b *Broker) messageLimit() int {
	return int(b.nc.MaxPayload()) - headerRoom
}

// MessageLimit is the largest body one message of the server carries, with
// room for its headers: a reply larger than it is never delivered.
func (b *Broker) MessageLimit() int { return b.messageLimit() }

// NotSent says that err, from PublishJob or PutJobRecord, means the message
// was not stored: the connection was down, or no JetStream server answered
// on the subject. Any other failure (an acknowledgement that did not come in
// time) may hide a message that was stored all the same.
func NotSent(err error) bool {
	return errors.Is(err, ErrNotConnected) || errors.Is(err, errNotSent) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrNoResponders)
}

// PublishJob publishes job on wire.JobSubject(job.Pool) with Nats-Msg-Id set
// to job.ID, so that publishing the same id again within DuplicateWindow is
// a no-op (the server reports a duplicate, PublishJob returns nil). While
// the connection is down it sends nothing and returns ErrNotConnected.
//
// It stamps job.V, sets job.Pool to wire.DefaultPool when empty and
// job.EnqueuedAt to now when zero. When the encoded job does not fit one
// message, the code is stored in the blobs store as "job-<id>" and
// job.CodeRef is set (job.Code is left as is in the caller's struct, only
// the published copy goes without it); Consume resolves it transparently.
// A job whose encoding exceeds MaxJobBytes fails with wire.ErrPayloadTooLarge.
func (b *Broker) PublishJob(ctx context.Context, job *wire.Job, opts ...PublishOption) error {
	m, err := b.jobMessage(ctx, job, opts...)
	if err != nil {
		return err
	}
	if err := b.publishJobMsg(ctx, m.subject, m.data, m.msgID); err != nil {
		return fmt.Errorf("broker: publish job %s: %w", job.ID, err)
	}
	b.jobPublished()
	return nil
}

// jobMsg is a job as PublishJob sends it.
type jobMsg struct {
	subject, msgID string
	data           []byte
}

// jobMessage checks and encodes job for PublishJob (storing its code in the
// blobs store when the job does not fit one message).
func (b *Broker) jobMessage(ctx context.Context, job *wire.Job, opts ...PublishOption) (*jobMsg, error) {
	var opt publishOptions
	for _, o := range opts {
		o(&opt)
	}
	if job == nil {
		return nil, errors.New("broker: publish: nil job")
	}
	if !idRe.MatchString(job.ID) {
		return nil, fmt.Errorf("broker: publish: invalid job id %q", job.ID)
	}
	if job.Pool == "" {
		job.Pool = wire.DefaultPool
	}
	if !wire.ValidPool(job.Pool) {
		return nil, fmt.Errorf("broker: publish job %s: invalid pool %q", job.ID, job.Pool)
	}
	if len(job.Code) > MaxJobBytes {
		return nil, fmt.Errorf("broker: publish job %s: code is %d bytes, more than %d: %w",
			job.ID, len(job.Code), MaxJobBytes, wire.ErrPayloadTooLarge)
	}
	if !b.nc.IsConnected() {
		return nil, fmt.Errorf("broker: publish job %s: %w", job.ID, ErrNotConnected)
	}
	job.V = wire.Version
	job.CodeRef = ""
	if job.EnqueuedAt.IsZero() {
		job.EnqueuedAt = time.Now().UTC()
	}
	data, err := encode(job)
	if err != nil {
		return nil, fmt.Errorf("broker: publish job %s: %w", job.ID, err)
	}
	if len(data) > MaxJobBytes {
		return nil, fmt.Errorf("broker: publish job %s: job is %d bytes, more than %d: %w",
			job.ID, len(data), MaxJobBytes, wire.ErrPayloadTooLarge)
	}
	if limit := b.messageLimit(); len(data) > limit {
		name := jobBlobName(job.ID)
		if err := b.putBlobOnce(ctx, name, []byte(job.Code)); err != nil {
			return nil, fmt.Errorf("broker: publish job %s: store code: %w", job.ID, err)
		}
		job.CodeRef = name
		small := *job
		small.Code = ""
		if data, err = encode(&small); err != nil {
			return nil, fmt.Errorf("broker: publish job %s: %w", job.ID, err)
		}
		if len(data) > limit {
			return nil, fmt.Errorf("broker: publish job %s: job without code is %d bytes, more than %d: %w",
				job.ID, len(data), limit, wire.ErrPayloadTooLarge)
		}
	}
	subject, msgID := wire.JobSubject(job.Pool), job.ID
	if opt.worker != "" {
		if !wire.ValidWorkerID(opt.worker) {
			return nil, fmt.Errorf("broker: publish job %s: invalid worker id %q", job.ID, opt.worker)
		}
		subject = wire.WorkerSubject(job.Pool, opt.worker)
	}
	if opt.msgID != "" {
		msgID = opt.msgID
	}
	return &jobMsg{subject: subject, msgID: msgID, data: data}, nil
}

// jobPublished counts a job published, renewing the stream's anchor every
// anchorEvery jobs.
func (b *Broker) jobPublished() {
	if b.published.Add(1)%anchorEvery == 0 && b.anchoring.CompareAndSwap(false, true) {
		go func() {
			defer b.anchoring.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
			defer cancel()
			if err := b.renewAnchor(ctx); err != nil {
				b.log.Debug("jobs stream anchor", "err", err)
			}
		}()
	}
}

// While the jobs stream elects a new leader (the node that led it died),
// a publish gets no answer: "no responders" at once, or nothing at all when
// the request went to the dead node. publishJobMsg tries again every
// publishRetryWait, each attempt bounded by publishAttemptTimeout, for
// publishAttempts attempts; the Nats-Msg-Id makes a job published twice
// one job.
const (
	publishRetryWait      = 250 * time.Millisecond
	publishAttemptTimeout = 5 * time.Second
	publishAttempts       = 4
)

// publishJobMsg publishes one job message on the jobs stream, riding out a
// leader election (see publishRetryWait).
func (b *Broker) publishJobMsg(ctx context.Context, subject string, data []byte, msgID string) error {
	var err error
	for range publishAttempts {
		actx, cancel := context.WithTimeout(ctx, publishAttemptTimeout)
		_, err = b.js.Publish(actx, subject, data, jetstream.WithMsgID(msgID), jetstream.WithExpectStream(wire.JobsStream),
			jetstream.WithRetryWait(publishRetryWait), jetstream.WithRetryAttempts(int(publishAttemptTimeout/publishRetryWait)))
		cancel()
		noAnswer := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrNoStreamResponse)
		if err == nil || ctx.Err() != nil || !noAnswer {
			return err
		}
	}
	return fmt.Errorf("no answer from stream %s in %d attempts of %s: %w", wire.JobsStream, publishAttempts, publishAttemptTimeout, err)
}

// anchorSubject is a subject of the jobs stream that no pool's consumer
// takes (pool subjects have one token after the prefix, this one two). The
// stream holds one message on it, the anchor, which keeps the stream's last
// block from ever being empty. Without it, a drained work queue empties its
// last block with every ack, and the file store deletes that block's file
// and creates a new one: a file created and one deleted per job, which on
// some file systems (ext4 without a journal skips recently deleted inodes
// when it allocates one) makes every file creation on the disk slower, the
// more so the more jobs run.
const anchorSubject = wire.JobsSubjectPre + "_.anchor"

// anchorEvery is how many published jobs apart the anchor is renewed, so
// that it stays in the stream's last block after the store starts a new
// one (a block holds thousands of small jobs).
const anchorEvery = 1000

// renewAnchor publishes a new anchor and purges the older ones. It is an
// optimization only: callers log its error and go on.
func (b *Broker) renewAnchor(ctx context.Context) error {
	if _, err := b.js.Publish(ctx, anchorSubject, nil, jetstream.WithExpectStream(wire.JobsStream)); err != nil {
		return err
	}
	return b.jobs.Purge(ctx, jetstream.WithPurgeSubject(anchorSubject), jetstream.WithPurgeKeep(1))
}

// putBlobOnce stores data as name unless an object with the same content is
// already there, so that republishing a job (deduplicated by the stream)
// never rewrites the blob a worker may be reading.
func (b *Broker) putBlobOnce(ctx context.Context, name string, data []byte) error {
	sum := sha256.Sum256(data)
	digest := "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:])
	info, err := b.blobs.GetInfo(ctx, name)
	if err == nil && info.Digest == digest && info.Size == uint64(len(data)) {
		return nil
	}
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return err
	}
	_, err = b.blobs.PutBytes(ctx, name, data)
	return err
}

// storedResult decodes a results-bucket value, which is either a
// wire.Result or a wire.ResultStub (BlobRef set), in one pass.
type storedResult struct {
	wire.Result
	BlobRef string `json:"blob_ref"`
}

// PutResult stores r under r.JobID, create-only: the first result stored
// for a job wins and later calls report stored=false with a nil error. It
// stamps r.V. A result whose encoding does not fit one message is written
// to the blobs store as "result-<job id>-<random>" and a small
// wire.ResultStub takes its place in the bucket.
func (b *Broker) PutResult(ctx context.Context, r *wire.Result) (stored bool, err error) {
	if r == nil {
		return false, errors.New("broker: put result: nil result")
	}
	if !idRe.MatchString(r.JobID) {
		return false, fmt.Errorf("broker: put result: invalid job id %q", r.JobID)
	}
	r.V = wire.Version
	data, err := encode(r)
	if err != nil {
		return false, fmt.Errorf("broker: put result %s: %w", r.JobID, err)
	}
	if len(data) <= b.messageLimit() {
		return b.createResult(ctx, r.JobID, data)
	}

	// Large result. Skip the upload when a result is already there (the
	// common case of a redelivered job), then upload under a unique name
	// and let the create-only stub decide who won.
	if _, err := b.results.Get(ctx, r.JobID); err == nil {
		return false, nil
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, fmt.Errorf("broker: put result %s: %w", r.JobID, err)
	}
	name := resultBlobName(r.JobID)
	if _, err := b.blobs.PutBytes(ctx, name, data); err != nil {
		return false, fmt.Errorf("broker: put result %s: store blob: %w", r.JobID, err)
	}
	stub, err := encode(&wire.ResultStub{V: wire.Version, JobID: r.JobID, BlobRef: name, Size: int64(len(data))})
	if err != nil {
		return false, fmt.Errorf("broker: put result %s: %w", r.JobID, err)
	}
	stored, err = b.createResult(ctx, r.JobID, stub)
	if !stored {
		// Lost the race or failed: the blob is nobody's. Best effort; the
		// store's TTL removes it otherwise.
		if derr := b.blobs.Delete(context.WithoutCancel(ctx), name); derr != nil {
			b.log.Debug("delete orphan result blob", "blob", name, "err", derr)
		}
	}
	return stored, err
}

func (b *Broker) createResult(ctx context.Context, jobID string, data []byte) (bool, error) {
	_, err := b.results.Create(ctx, jobID, data)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyExists):
		return false, nil
	default:
		return false, fmt.Errorf("broker: put result %s: %w", jobID, err)
	}
}

// GetResult returns the result stored for jobID, or an error wrapping
// wire.ErrResultNotFound when there is none (yet, or any more).
func (b *Broker) GetResult(ctx context.Context, jobID string) (*wire.Result, error) {
	if !idRe.MatchString(jobID) {
		return nil, fmt.Errorf("broker: get result: invalid job id %q", jobID)
	}
	data, err := b.storedResult(ctx, jobID)
	if err != nil {
		return nil, err
	}
	return b.decodeResult(ctx, jobID, data)
}

// storedResult reads jobID's value in the results bucket (a result or a stub).
func (b *Broker) storedResult(ctx context.Context, jobID string) ([]byte, error) {
	e, err := b.results.Get(ctx, jobID)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, fmt.Errorf("broker: get result %s: %w", jobID, wire.ErrResultNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("broker: get result %s: %w", jobID, err)
	}
	return e.Value(), nil
}

// JobRecord is what is known of a job before it has a result: written by
// the frontend before the job is first published, so that whoever holds the
// job id can tell a job that is queued or running (a record, no result) from
// one that never was (no record) and from one whose deadline passed without
// a result. It lives in the results bucket under "job.<id>" (job ids have no
// dots, so it never meets a result's key) and expires with the results.
type JobRecord struct {
	V          int          `json:"v"`
	JobID      string       `json:"job_id"`
	Scope      string       `json:"scope"`
	Kind       wire.JobKind `json:"kind"`
	EnqueuedAt time.Time    `json:"enqueued_at"`
	// Deadline is the job's: no worker starts it later.
	Deadline time.Time `json:"deadline"`
	// TimeoutMS is the job's run time limit: a job started just before its
	// deadline may run this long past it.
	TimeoutMS int64 `json:"timeout_ms"`
	// BatchRow and BatchAttempt are a batch job's (wire.Job.BatchRow,
	// wire.Job.BatchAttempt).
	BatchRow     int64 `json:"batch_row,omitempty"`
	BatchAttempt int64 `json:"batch_attempt,omitempty"`
}

// RecordOf is job's record.
func RecordOf(job *wire.Job) *JobRecord {
	return &JobRecord{
		V: wire.Version, JobID: job.ID, Scope: job.Scope, Kind: job.Kind,
		EnqueuedAt: job.EnqueuedAt, Deadline: job.Deadline, TimeoutMS: job.TimeoutMS,
		BatchRow: job.BatchRow, BatchAttempt: job.BatchAttempt,
	}
}

// ErrNoJobRecord is returned, wrapped, by GetJobRecord when the bucket holds
// no record of the job (never written, deleted, or past retention).
var ErrNoJobRecord = errors.New("broker: no record of the job")

// jobRecordKey is the results-bucket key of jobID's record.
func jobRecordKey(jobID string) string { return "job." + jobID }

// PutJobRecord stores rec, create-only: a record already there (a retry of
// the same job) is kept and PutJobRecord returns nil. While the connection is
// down it sends nothing and returns ErrNotConnected.
func (b *Broker) PutJobRecord(ctx context.Context, rec *JobRecord) error {
	data, err := b.recordData(rec)
	if err != nil {
		return err
	}
	if _, err := b.results.Create(ctx, jobRecordKey(rec.JobID), data); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("broker: put job record %s: %w", rec.JobID, err)
	}
	return nil
}

// recordData checks and encodes rec for PutJobRecord.
func (b *Broker) recordData(rec *JobRecord) ([]byte, error) {
	if rec == nil || !idRe.MatchString(rec.JobID) {
		return nil, errors.New("broker: put job record: no valid job id")
	}
	if !b.nc.IsConnected() {
		return nil, fmt.Errorf("broker: put job record %s: %w", rec.JobID, ErrNotConnected)
	}
	rec.V = wire.Version
	data, err := encode(rec)
	if err != nil {
		return nil, fmt.Errorf("broker: put job record %s: %w", rec.JobID, err)
	}
	return data, nil
}

// SubmitJob does what PutJobRecord(rec) then PublishJob(job, opts...) do,
// without a round trip in between: both messages go out on the connection,
// the record first, then both acknowledgements are awaited, the record's
// first. recorded, when not nil, is called with the record's outcome as
// soon as it is known, before the job's acknowledgement is awaited: once
// it is called with nil, the record is stored.
//
// The server reads a connection's messages in order, so a job it received
// came after its record; but the two streams store what they receive each
// in a goroutine of its own, so the job may be stored, and delivered to a
// worker, a moment before the record is. Nothing reads a record before its
// job id is known, and callers hand the id out from recorded, once the
// record is stored. A job SubmitJob refuses (invalid, too large, not
// connected) is refused before the record is sent: recorded is not called
// and recErr says the record was not sent either. A record or a job whose
// asynchronous acknowledgement fails is sent once more the synchronous way
// (PutJobRecord, PublishJob's publish), which tells an existing record or
// a leader election apart.
func (b *Broker) SubmitJob(ctx context.Context, rec *JobRecord, job *wire.Job, recorded func(error), opts ...PublishOption) (recErr, pubErr error) {
	data, err := b.recordData(rec)
	if err != nil {
		return err, err
	}
	m, err := b.jobMessage(ctx, job, opts...)
	if err != nil {
		return fmt.Errorf("broker: put job record %s: not sent: %w", rec.JobID, err), err
	}
	recF, recErr := b.js.PublishMsgAsync(&nats.Msg{Subject: jobRecordSubject(rec.JobID), Data: data},
		jetstream.WithExpectLastSequencePerSubject(0))
	var jobF jetstream.PubAckFuture
	if recErr == nil {
		jobF, pubErr = b.js.PublishMsgAsync(&nats.Msg{Subject: m.subject, Data: m.data},
			jetstream.WithMsgID(m.msgID), jetstream.WithExpectStream(wire.JobsStream))
	}
	if recErr == nil {
		recErr = awaitAck(ctx, recF)
	}
	if recErr != nil && ctx.Err() == nil {
		recErr = b.PutJobRecord(ctx, rec)
	}
	if recorded != nil {
		recorded(recErr)
	}
	if jobF == nil || pubErr != nil {
		// Not sent (or the record could not be): the synchronous way.
		if recErr != nil {
			return recErr, fmt.Errorf("broker: publish job %s: %w, as its record was not written: %w", job.ID, errNotSent, recErr)
		}
		pubErr = nil
	} else {
		pubErr = awaitAck(ctx, jobF)
		if pubErr == nil {
			b.jobPublished()
			return recErr, nil
		}
		if ctx.Err() != nil {
			return recErr, fmt.Errorf("broker: publish job %s: %w", job.ID, pubErr)
		}
	}
	if err := b.publishJobMsg(ctx, m.subject, m.data, m.msgID); err != nil {
		return recErr, fmt.Errorf("broker: publish job %s: %w", job.ID, err)
	}
	b.jobPublished()
	return recErr, nil
}

// errNotSent is SubmitJob's reason for a job it did not send.
var errNotSent = errors.New("not sent")

// jobRecordSubject is the subject a put of jobID's record is published on
// (the results bucket's, as KeyValue.Create publishes it).
func jobRecordSubject(jobID string) string {
	return "$KV." + wire.ResultsBucket + "." + jobRecordKey(jobID)
}

// awaitAck waits for f's acknowledgement, or for ctx.
func awaitAck(ctx context.Context, f jetstream.PubAckFuture) error {
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// GetJobRecord returns jobID's record, or an error wrapping ErrNoJobRecord.
func (b *Broker) GetJobRecord(ctx context.Context, jobID string) (*JobRecord, error) {
	if !idRe.MatchString(jobID) {
		return nil, fmt.Errorf("broker: get job record: invalid job id %q", jobID)
	}
	e, err := b.results.Get(ctx, jobRecordKey(jobID))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, fmt.Errorf("broker: get job record %s: %w", jobID, ErrNoJobRecord)
	}
	if err != nil {
		return nil, fmt.Errorf("broker: get job record %s: %w", jobID, err)
	}
	var rec JobRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, fmt.Errorf("broker: decode job record %s: %w", jobID, err)
	}
	if rec.V != wire.Version {
		return nil, fmt.Errorf("broker: job record %s has version %d: %w", jobID, rec.V, wire.ErrBadVersion)
	}
	return &rec, nil
}

// DeleteJobRecord removes jobID's record: the job was refused before it
// could be queued and will never run.
func (b *Broker) DeleteJobRecord(ctx context.Context, jobID string) error {
	if !idRe.MatchString(jobID) {
		return fmt.Errorf("broker: delete job record: invalid job id %q", jobID)
	}
	if err := b.results.Delete(ctx, jobRecordKey(jobID)); err != nil {
		return fmt.Errorf("broker: delete job record %s: %w", jobID, err)
	}
	return nil
}

// WaitResult returns the result for jobID as soon as it exists, which may
// be at once; when ctx ends first it returns ctx.Err() unwrapped.
//
// It subscribes to the subject the results bucket republishes jobID's key
// on (resultsRepublish), then reads the key: a result stored before the
// subscription took effect is found by the read, one stored after it
// arrives as a message. No consumer is created per call. The server
// republishes a put only once the bucket has stored it, so a message is
// the key's value: a create-only put that lost to another worker's, which
// subscribers of the key's own subject would see too, is never
// republished, and the message is returned without reading the key again.
// In case a message is missed all the same (interest still propagating
// through a NATS cluster, a reconnect, a bucket whose configuration a
// process of an earlier version wrote back without the republishing), the
// key is read again after a while, at growing intervals.
func (b *Broker) WaitResult(ctx context.Context, jobID string) (*wire.Result, error) {
	if !idRe.MatchString(jobID) {
		return nil, fmt.Errorf("broker: wait result: invalid job id %q", jobID)
	}
	msgs := make(chan *nats.Msg, 4)
	sub, err := b.nc.Subscribe(storedResultSubject(jobID), func(m *nats.Msg) {
		select {
		case msgs <- m:
		default: // enough of them queued already
		}
	})
	if err != nil {
		return nil, fmt.Errorf("broker: wait result %s: %w", jobID, err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	// read reads the key: done says that r or err is the answer, and not
	// done that the bucket has no result yet.
	// A read that gets no answer in waitReadTimeout, or no responders (the
	// bucket electing a leader), is not done either: the next read goes to
	// whichever server leads it then.
	read := func() (r *wire.Result, done bool, err error) {
		rctx, cancel := context.WithTimeout(ctx, waitReadTimeout)
		data, err := b.storedResult(rctx, jobID)
		cancel()
		if err == nil {
			r, err = b.decodeResult(ctx, jobID, data)
		}
		switch {
		case err == nil:
			return r, true, nil
		case ctx.Err() != nil:
			return nil, true, ctx.Err()
		case errors.Is(err, wire.ErrResultNotFound):
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout):
			b.log.Debug("wait result: read again later", "job", jobID, "err", err)
		default:
			return nil, true, fmt.Errorf("broker: wait result %s: %w", jobID, err)
		}
		return nil, false, nil
	}

	recheck := waitRecheckMin
	timer := time.NewTimer(recheck)
	defer timer.Stop()
	for first := true; ; first = false {
		if r, done, err := read(); done {
			return r, err
		}
		if first && b.waitingHook != nil {
			b.waitingHook(jobID)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case m := <-msgs:
			if op := m.Header.Get(kvOperationHeader); op != "" && op != "PUT" {
				continue // a delete or purge: read the key again
			}
			return b.decodeResult(ctx, jobID, m.Data)
		case <-timer.C:
			recheck = min(2*recheck, waitRecheckMax)
			timer.Reset(recheck)
		}
	}
}

// resultsRepublish makes the results bucket republish every result it
// stores (a key of one token: a job id, not a "job.<id>" record) on
// storedResultSubject, once stored: WaitResult's wake-up, which needs no
// read of the key to tell a stored result from a refused put.
var resultsRepublish = &jetstream.RePublish{
	Source:      "$KV." + wire.ResultsBucket + ".*",
	Destination: storedResultsPre + "{{wildcard(1)}}",
}

// storedResultsPre begins the subjects results are republished on. It lies
// outside every stream's subjects.
const storedResultsPre = "codexec.results.stored."

// storedResultSubject is the subject the results bucket republishes jobID's
// result on.
func storedResultSubject(jobID string) string { return storedResultsPre + jobID }

// kvOperationHeader marks deletes and purges in a key-value bucket.
const kvOperationHeader = "KV-Operation"

// waitReadTimeout bounds one read of the key in WaitResult.
const waitReadTimeout = 5 * time.Second

// waitRecheckMin and waitRecheckMax bound the interval at which WaitResult
// reads the key again without having been woken.
const (
	waitRecheckMin = 500 * time.Millisecond
	waitRecheckMax = 5 * time.Second
)

func (b *Broker) decodeResult(ctx context.Context, jobID string, data []byte) (*wire.Result, error) {
	var sr storedResult
	if err := json.Unmarshal(data, &sr); err != nil {
		return nil, fmt.Errorf("broker: decode result %s: %w", jobID, err)
	}
	if sr.BlobRef != "" {
		select {
		case b.blobReads <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("broker: get result %s: blob %s: %w", jobID, sr.BlobRef, ctx.Err())
		}
		blob, err := b.blobs.GetBytes(ctx, sr.BlobRef)
		<-b.blobReads
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil, fmt.Errorf("broker: get result %s: blob %s: %w", jobID, sr.BlobRef, wire.ErrResultNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("broker: get result %s: blob %s: %w", jobID, sr.BlobRef, err)
		}
		sr = storedResult{}
		if err := json.Unmarshal(blob, &sr.Result); err != nil {
			return nil, fmt.Errorf("broker: decode result %s: %w", jobID, err)
		}
	}
	if sr.V != wire.Version {
		return nil, fmt.Errorf("broker: result %s has version %d: %w", jobID, sr.V, wire.ErrBadVersion)
	}
	r := sr.Result
	return &r, nil
}

// maxBlobReads is how many result blobs a Broker reads at once. A blob is
// read in chunks over the connection every call of the process shares, and
// 16 calls reading a result of 2 MiB at once (get_job_result, or one
// get_job_results call) timed the reads out on the 2-core development
// machine and had the connection dropped, failing every tenant's calls in
// flight on that frontend.
const maxBlobReads = 4

// encode is json.Marshal without HTML escaping, so that code full of '<'
// does not grow six-fold on the wire.
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

type publishOptions struct{ worker, msgID string }

// PublishOption changes where and how PublishJob publishes.
type PublishOption func(*publishOptions)

// ToWorker sends the job to one worker of its pool (wire.WorkerSubject)
// instead of the pool's shared consumer. That worker must consume it
// (ConsumeWorker); if it dies first, the caller republishes to the pool.
func ToWorker(id string) PublishOption { return func(o *publishOptions) { o.worker = id } }

// WithMsgID replaces the deduplication id (the job id by default), so the
// same job can be published a second time, e.g. to the pool after its
// targeted worker went away. Results are create-only by job id, so only one
// run's result is kept.
func WithMsgID(id string) PublishOption { return func(o *publishOptions) { o.msgID = id } }

// PublishProgress publishes one progress line of job jobID on core NATS
// (best effort: nobody may be listening, and nothing is stored).
func (b *Broker) PublishProgress(jobID, line string) error {
	return b.nc.Publish(wire.ProgressSubject(jobID), []byte(line))
}

// SubscribeProgress calls fn with each progress line of job jobID until the
// returned stop is called. Subscribe before publishing the job.
func (b *Broker) SubscribeProgress(jobID string, fn func(line string)) (stop func(), err error) {
	sub, err := b.nc.Subscribe(wire.ProgressSubject(jobID), func(m *nats.Msg) { fn(string(m.Data)) })
	if err != nil {
		return nil, fmt.Errorf("broker: subscribe progress: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}
