package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/codexec/codexec/wire"
)

// A task (an MCP task: a tool call that returns at once and is answered
// later) lives in the results bucket, so that any frontend answers for it
// and it expires with the results:
//
//	task.<scope>.<id>     its record (TaskRecord), written when it is created
//	taskout.<scope>.<id>  its outcome (the tool's result, encoded by the
//	                      frontend), written once, when the call is over
//
// The scope is part of the key: a task is looked up under the caller's
// scope, so another scope's task is not found, by construction. Task ids,
// like job ids, have no dots; scopes (wire.ValidScope) have none either.

// TaskRecord is what is known of a task from its creation.
type TaskRecord struct {
	V      int    `json:"v"`
	TaskID string `json:"task_id"`
	Scope  string `json:"scope"`
	// Tool is the tool the task calls.
	Tool      string    `json:"tool"`
	CreatedAt time.Time `json:"created_at"`
	// TTLMS is how long after its creation the task is kept, in
	// milliseconds (the results' retention, or less when asked).
	TTLMS int64 `json:"ttl_ms"`
	// Deadline is when the task is over whatever happened: by then a live
	// frontend has stored its outcome, and its job, if it was queued, has
	// its result. A task with neither after it lost its frontend before
	// its job was queued (zero: a record of an older version, no deadline).
	Deadline time.Time `json:"deadline,omitzero"`
}

// ErrNoTask is returned, wrapped, when the scope has no task of that id
// (never created, another scope's, or past retention).
var ErrNoTask = errors.New("broker: no such task")

// ErrNoTaskOutcome is returned, wrapped, by GetTaskOutcome while the task
// has no outcome.
var ErrNoTaskOutcome = errors.New("broker: the task has no outcome yet")

// Retention is how long results, job records and tasks are kept.
func (b *Broker) Retention() time.Duration { return b.cfg.Retention }

func taskKey(scope, id string) string    { return "task." + scope + "." + id }
func outcomeKey(scope, id string) string { return "taskout." + scope + "." + id }

// checkTask refuses a scope or id that is not safe in a key.
func checkTask(scope, id string) error {
	if !wire.ValidScope(scope) || !idRe.MatchString(id) {
		return fmt.Errorf("broker: task: invalid scope %q or id %q", scope, id)
	}
	return nil
}

// PutTask stores rec, create-only.
func (b *Broker) PutTask(ctx context.Context, rec *TaskRecord) error {
	if rec == nil {
		return errors.New("broker: put task: nil record")
	}
	if err := checkTask(rec.Scope, rec.TaskID); err != nil {
		return err
	}
	if !b.nc.IsConnected() {
		return fmt.Errorf("broker: put task %s: %w", rec.TaskID, ErrNotConnected)
	}
	rec.V = wire.Version
	data, err := encode(rec)
	if err != nil {
		return fmt.Errorf("broker: put task %s: %w", rec.TaskID, err)
	}
	if _, err := b.results.Create(ctx, taskKey(rec.Scope, rec.TaskID), data); err != nil {
		return fmt.Errorf("broker: put task %s: %w", rec.TaskID, err)
	}
	return nil
}

// GetTask returns scope's task id, or an error wrapping ErrNoTask.
func (b *Broker) GetTask(ctx context.Context, scope, id string) (*TaskRecord, error) {
	if err := checkTask(scope, id); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoTask, err)
	}
	e, err := b.results.Get(ctx, taskKey(scope, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, fmt.Errorf("broker: get task %s: %w", id, ErrNoTask)
	}
	if err != nil {
		return nil, fmt.Errorf("broker: get task %s: %w", id, err)
	}
	return decodeTask(id, e.Value())
}

func decodeTask(id string, data []byte) (*TaskRecord, error) {
	var rec TaskRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("broker: decode task %s: %w", id, err)
	}
	if rec.V != wire.Version {
		return nil, fmt.Errorf("broker: task %s has version %d: %w", id, rec.V, wire.ErrBadVersion)
	}
	return &rec, nil
}

// ListTasks returns up to limit of scope's tasks whose ids sort after
// after ("" for the first), in id order (task ids are ULIDs: creation
// order), and whether more follow.
func (b *Broker) ListTasks(ctx context.Context, scope, after string, limit int) ([]*TaskRecord, bool, error) {
	if !wire.ValidScope(scope) {
		return nil, false, fmt.Errorf("broker: list tasks: invalid scope %q", scope)
	}
	lister, err := b.results.ListKeysFiltered(ctx, taskKey(scope, "*"))
	if err != nil {
		return nil, false, fmt.Errorf("broker: list tasks: %w", err)
	}
	prefix := taskKey(scope, "")
	var ids []string
	for k := range lister.Keys() {
		if id := k[len(prefix):]; id > after {
			ids = append(ids, id)
		}
	}
	_ = lister.Stop()
	sort.Strings(ids)
	more := len(ids) > limit
	if more {
		ids = ids[:limit]
	}
	recs := make([]*TaskRecord, 0, len(ids))
	for _, id := range ids {
		rec, err := b.GetTask(ctx, scope, id)
		if errors.Is(err, ErrNoTask) {
			continue // expired since it was listed
		}
		if err != nil {
			return nil, false, err
		}
		recs = append(recs, rec)
	}
	return recs, more, nil
}

// PutTaskOutcome stores data as scope's task id's outcome, create-only:
// stored is false when an outcome was there already. data must fit one
// message (wire.ErrPayloadTooLarge otherwise): callers store a large
// result elsewhere and a reference to it here.
func (b *Broker) PutTaskOutcome(ctx context.Context, scope, id string, data []byte) (stored bool, err error) {
	if err := checkTask(scope, id); err != nil {
		return false, err
	}
	if len(data) > b.messageLimit() {
		return false, fmt.Errorf("broker: put task outcome %s: %d bytes: %w", id, len(data), wire.ErrPayloadTooLarge)
	}
	_, err = b.results.Create(ctx, outcomeKey(scope, id), data)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyExists):
		return false, nil
	default:
		return false, fmt.Errorf("broker: put task outcome %s: %w", id, err)
	}
}

// GetTaskOutcome returns scope's task id's outcome, or an error wrapping
// ErrNoTaskOutcome.
func (b *Broker) GetTaskOutcome(ctx context.Context, scope, id string) ([]byte, error) {
	if err := checkTask(scope, id); err != nil {
		return nil, err
	}
	e, err := b.results.Get(ctx, outcomeKey(scope, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, fmt.Errorf("broker: get task outcome %s: %w", id, ErrNoTaskOutcome)
	}
	if err != nil {
		return nil, fmt.Errorf("broker: get task outcome %s: %w", id, err)
	}
	return e.Value(), nil
}

// WaitTaskOutcome returns scope's task id's outcome as soon as it exists,
// or the first error of settled (called at the start and whenever the
// outcome is read again, e.g. to notice the job behind the task ended
// without one), or ctx.Err() unwrapped. Like WaitResult it listens on the
// key's subject and reads the key again at growing intervals.
func (b *Broker) WaitTaskOutcome(ctx context.Context, scope, id string, settled func(context.Context) error) ([]byte, error) {
	if err := checkTask(scope, id); err != nil {
		return nil, err
	}
	msgs := make(chan struct{}, 1)
	sub, err := b.nc.Subscribe("$KV."+wire.ResultsBucket+"."+outcomeKey(scope, id), func(*nats.Msg) {
		select {
		case msgs <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("broker: wait task outcome %s: %w", id, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	recheck := waitRecheckMin
	timer := time.NewTimer(recheck)
	defer timer.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, waitReadTimeout)
		data, err := b.GetTaskOutcome(rctx, scope, id)
		cancel()
		switch {
		case err == nil:
			return data, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case !errors.Is(err, ErrNoTaskOutcome):
			b.log.Debug("wait task outcome: read again later", "task", id, "err", err)
		}
		if settled != nil {
			if err := settled(ctx); err != nil {
				return nil, err
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-msgs:
		case <-timer.C:
			recheck = min(2*recheck, waitRecheckMax)
			timer.Reset(recheck)
		}
	}
}
