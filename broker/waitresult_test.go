package broker_test

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
	"github.com/codexec/codexec/wire"
)

// A put on a result's key that the bucket refuses (here: a create-only put
// whose expected sequence is wrong, as a losing worker's is) is seen by
// every subscriber of the key's subject; WaitResult must not take it for
// the result. It returns the result the bucket stores afterwards.
func TestWaitResultIgnoresARefusedPut(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	jobID := ulid.Make().String()
	watching := make(chan struct{})
	broker.SetWaitingHook(tb.b, func(id string) {
		if id == jobID {
			close(watching)
		}
	})
	type res struct {
		r   *wire.Result
		err error
	}
	got := make(chan res, 1)
	go func() {
		r, err := tb.b.WaitResult(ctx, jobID)
		got <- res{r, err}
	}()
	recv(t, ctx, watching)

	refused, err := json.Marshal(wire.Result{V: wire.Version, JobID: jobID, Status: wire.StatusOK, Stdout: "refused"})
	if err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: "$KV." + wire.ResultsBucket + "." + jobID, Data: refused, Header: nats.Header{}}
	m.Header.Set("Nats-Expected-Last-Subject-Sequence", "99")
	if _, err := tb.js.PublishMsg(ctx, m); err == nil {
		t.Fatal("the bucket stored a put with a wrong expected sequence")
	}
	if stored, err := tb.b.PutResult(ctx, &wire.Result{JobID: jobID, Status: wire.StatusOK, Stdout: "stored"}); err != nil || !stored {
		t.Fatalf("PutResult = %v, %v", stored, err)
	}
	r := recv(t, ctx, got)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.r.Stdout != "stored" {
		t.Fatalf("WaitResult returned %q, want the stored result", r.r.Stdout)
	}
}

// A results bucket written by an earlier version, without the republishing
// WaitResult is woken by, gets it back when a broker opens.
func TestOpenRepublishesResults(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	kv, err := tb.js.KeyValue(ctx, wire.ResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.(*jetstream.KeyValueBucketStatus).Config()
	if cfg.RePublish == nil {
		t.Fatal("the results bucket does not republish what it stores")
	}
	cfg.RePublish = nil
	if _, err := tb.js.UpdateKeyValue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	brokertest.Open(t, tb.e, broker.Config{})
	st, err = kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.(*jetstream.KeyValueBucketStatus).Config().RePublish == nil {
		t.Fatal("opening a broker left the results bucket without its republishing")
	}
}
