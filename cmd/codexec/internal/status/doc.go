// Package status is `codexec status`: the cluster at a glance, read from
// where the cluster keeps its own state, and nothing else.
//
// The workers come from their presence records in the state store (one
// envspec.Advert each, renewed every heartbeat): pool, host, labels, load
// against concurrency, warm interpreters and the environments held. The
// queues come from JetStream: each consumer of the jobs stream is a pool's
// (filter wire.JobSubject) or one worker's (wire.WorkerSubject), and its
// state says how many jobs wait (NumPending) and how many are handed out and
// not yet acknowledged (NumAckPending). Rates are differences between two
// reads: jobs handed to workers per second from the consumers' delivery
// counters, jobs published per second from the stream's last sequence.
//
// Read takes one Snapshot and never writes anything JetStream holds (it
// looks consumers and the stream up, it does not create them). Rates fills
// a snapshot's rates from the one before it. Text, JSON and Watch render
// snapshots: Watch redraws one screen in place on a terminal and prints one
// block per refresh otherwise.
package status
