package cli

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The flags of a highly available cluster reach the broker and the store.
func TestClusterHAFlags(t *testing.T) {
	t.Parallel()
	f := newFlags("worker", io.Discard)
	var cf clusterFlags
	cf.register(f)
	err := f.Parse([]string{"--replicas", "3", "--redis-sentinel", "127.0.0.1:26379, 127.0.0.1:26380,",
		"--redis-master", "codexec", "--redis-wait", "1", "--redis", "redis://:pw@unused/2"})
	if err != nil {
		t.Fatal(err)
	}
	if cf.replicas != 3 {
		t.Errorf("replicas = %d", cf.replicas)
	}
	o := cf.redis.options(cf.redisURL)
	if !slices.Equal(o.SentinelAddrs, []string{"127.0.0.1:26379", "127.0.0.1:26380"}) || o.MasterName != "codexec" ||
		o.WaitReplicas != 1 || o.URL != "redis://:pw@unused/2" {
		t.Errorf("redis options = %+v", o)
	}

	var plain clusterFlags
	plain.register(newFlags("worker", io.Discard))
	if o := plain.redis.options(plain.redisURL); plain.replicas != 1 || o.SentinelAddrs != nil || o.WaitReplicas != 0 {
		t.Errorf("defaults: replicas %d, redis options %+v", plain.replicas, o)
	}
}

// Every URL of a cluster's list has its password hidden.
func TestRedactURLList(t *testing.T) {
	t.Parallel()
	got := redactURL("nats://u:secret@a:4222,nats://u:secret@b:4222,nats://c:4222")
	if want := "nats://***@a:4222,nats://***@b:4222,nats://c:4222"; got != want {
		t.Errorf("redactURL = %q, want %q", got, want)
	}
}

// Opening the broker is retried on the errors of a forming JetStream
// cluster, and only on those.
func TestJetStreamForming(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("broker: create stream CODEXEC_JOBS: %w", err) }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{wrap(&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement"}), true},
		{wrap(&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}), true},
		{wrap(nats.ErrNoResponders), true},
		{wrap(jetstream.ErrJetStreamNotEnabled), false},
		{wrap(jetstream.ErrJetStreamNotEnabledForAccount), false},
		{wrap(&jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"}), false},
		{errors.New("broker: invalid config: replicas 7 is not between 1 and 5"), false},
	} {
		if got := jetStreamForming(tc.err); got != tc.want {
			t.Errorf("jetStreamForming(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
