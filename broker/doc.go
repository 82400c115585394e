// Package broker is the only package of codexec that knows NATS JetStream.
// Frontends publish jobs and wait for results through it; workers consume
// jobs and store results through it; `codexec dev` and tests run its
// embedded server (StartEmbedded, and package brokertest for tests). The
// types that travel are in package wire.
//
// # Layout on the server
//
// Open creates or updates three resources, idempotently, so every process
// may call it at start-up:
//
//   - Stream wire.JobsStream ("CODEXEC_JOBS"), subjects "codexec.jobs.>",
//     one subject per worker pool (wire.JobSubject). WorkQueuePolicy: a job
//     leaves the stream when a worker acknowledges (or terminates) it, and
//     each subject can have only one consumer, so a job never runs on two
//     pools. File storage: queued jobs survive a server restart. A
//     Duplicates window of two minutes with Nats-Msg-Id = job id makes
//     PublishJob idempotent: a frontend that retries a publish after a
//     timeout does not queue the job twice. MaxMsgSize is the server's max
//     payload. Jobs do not expire: they wait for a worker. The stream also
//     holds one message on "codexec.jobs._.anchor", which no consumer takes:
//     it keeps the file store from deleting and recreating its last block
//     each time the queue drains (see anchorSubject).
//   - Durable pull consumer wire.ConsumerName(pool) ("pool-<pool>") per
//     pool, filtered on the pool's subject and shared by every worker of
//     the pool (pull consumers balance by who asks). Explicit acks, AckWait
//     and MaxDeliver from Config. Consume creates or updates it, so the last
//     worker to start sets AckWait and MaxDeliver; give the workers of a
//     pool the same values. Batch jobs (SubmitJobs) wait on the pool's
//     "codexec.jobs.<pool>.batch" for a consumer of their own,
//     wire.BatchConsumerName(pool), that ConsumeBatch pulls from only in idle
//     slots (batch.go).
//   - Key-value bucket wire.ResultsBucket ("codexec-results"): one key per
//     job id for its result and one "job.<id>" for its record (JobRecord,
//     written by the frontend before the job is published), and one
//     "batchcancel.<scope>" per cancelled batch (CancelBatch), history 1, TTL
//     Config.Retention, file storage. Results are
//     written create-only, so the first result of a job wins even if a
//     redelivered job runs twice, and a client can fetch a result long after
//     the connection that asked for it is gone. WaitResult subscribes to
//     the key's subject and reads the key when woken (no consumer per
//     call, no polling but a slow safety net).
//   - Key-value bucket ClaimsBucket ("codexec-claims"): one key per job id,
//     history 1, TTL Config.Retention, file storage: the worker that claimed
//     the job before starting it (claims.go). Claims are created
//     create-only and taken over at a revision, so of two workers one
//     wins; whether a claim's holder lives is for package worker to tell.
//   - Every stream, bucket and store has Config.Replicas copies (3 on a
//     three-node cluster; defined through streamConfig, keyValueConfig and
//     objectStoreConfig). While one elects a new leader after a node died,
//     nobody answers: PublishJob publishes again, for up to 20s, and
//     WaitResult reads again, each read bounded to 5s.
//   - Object store wire.BlobsBucket ("codexec-blobs"), TTL Config.Retention,
//     file storage, for what does not fit one message: the code of a large
//     job ("job-<id>", referenced by Job.CodeRef) and large results
//     ("result-<id>-<random>", referenced by a wire.ResultStub stored in the
//     results bucket in the result's place). Both are resolved
//     transparently: handlers always see Job.Code, readers always see the
//     Result. The random suffix on result blobs keeps two racing writers
//     from overwriting each other's blob before the create-only stub
//     decides which one won; the loser deletes its blob.
//
// A job's code blob is deleted when its delivery is acked (the job is
// done), so a large job's code is held on the server only while the job is
// queued or running; a copy of the job delivered after that (a redelivery
// whose ack was lost, the pool's copy of a targeted job) finds its result
// stored and is acked. A blob whose delete failed expires after Retention
// like everything else; a job still queued by then is terminated when a
// worker receives it. Keep job deadlines well below Retention.
//
// # Delivery policy
//
// A worker's Consume loop asks the server for one job at a time, and only
// when it has a free handler slot, so a busy worker holds no queued jobs
// that an idle one could run, and each worker has at most one pull request
// waiting on the server. While a handler runs, the
// consumer sends InProgress every AckWait/3: AckWait then bounds how long
// a dead or partitioned worker keeps a job, not how long a job may run.
// The outcome of a delivery maps onto JetStream as follows:
//
//   - Ack: the job is done (its result stored). A handler that returns
//     without settling its delivery gets it Ack'd automatically, because
//     the handler is the one that knows whether a result was stored, and a
//     forgotten Ack would otherwise run the job again after AckWait.
//   - Nak(delay): retry later, on any worker of the pool; each delivery
//     counts against MaxDeliver, so a job that can never succeed stops
//     coming back. A panicking handler is recovered and its job Nak'd
//     after a delay. A job whose deliveries ran out is handed to
//     OnExhausted's subscribers (exhausted.go), so that it gets a result.
//   - Term(reason): the job can never run (undecodable, unknown wire
//     version, foreign or missing code blob); it leaves the stream and the
//     server publishes the reason in a MSG_TERMINATED advisory. Such
//     messages never reach handlers, since retrying them would only burn
//     attempts.
//   - Stop with time to spare waits for handlers to finish. Stop whose
//     context ends first, Broker.Close, and the end of Consume's context
//     cancel the handlers' contexts and Nak their jobs, so that another
//     worker takes them at once rather than after AckWait; Stop then
//     waits for the handlers to return. A worker that dies or loses its
//     connection sends nothing: its jobs come back after AckWait, with
//     Attempt one higher.
//
// Delivery is at least once: a job can run twice (a worker partitioned for
// longer than AckWait, an Ack lost on the way). The create-only result
// write makes the second run harmless to readers; a worker may also call
// GetResult before running a job whose Attempt is above 1.
package broker
