package broker

import (
	"context"
	"fmt"

	"github.com/codexec/codexec/wire"
)

// QueueDepth reads the state of pool's consumer on the jobs stream: the
// jobs waiting to be delivered, and those delivered to a worker and not yet
// acknowledged. One request to the server (a consumer info); callers that
// ask often (metrics scrapes) cache it.
func (b *Broker) QueueDepth(ctx context.Context, pool string) (waiting, unacked uint64, err error) {
	c, err := b.jobs.Consumer(ctx, wire.ConsumerName(pool))
	if err != nil {
		return 0, 0, fmt.Errorf("broker: queue of pool %s: %w", pool, err)
	}
	info := c.CachedInfo()
	return info.NumPending, uint64(info.NumAckPending), nil
}
