package cli

import (
	"io"
	"slices"
	"testing"
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
