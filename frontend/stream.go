package frontend

import (
	"context"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/codexec/codexec/wire"
)

// firstOutputProgress is the progress value of a run's first output
// notification: 0 announces the job's id (announceJob) and 1 a GPU job's
// place in its queue (gpu.go), and progress must increase.
const firstOutputProgress = 2

// outputProgressMax bounds one output notification: the worker's message is
// two stream tails of at most 400 bytes and a line of counts.
const outputProgressMax = 1024

// streamOutput asks the worker for job's output while it runs when the call
// sent a progress token, and forwards it to the client as progress
// notifications, at most one per Config.ProgressInterval (the worker sends
// what is new since its last message, the end of it when it is long). A
// client with an idle timeout keeps the call open this way, and a model can
// follow a long run. The returned stop ends the forwarding, sending what is
// still pending; without a token it does nothing.
func (f *Frontend) streamOutput(ctx context.Context, job *wire.Job) (stop func()) {
	token, _ := ctx.Value(progressTokenKey{}).(mcp.ProgressToken)
	srv := server.ServerFromContext(ctx)
	if token == nil || srv == nil {
		return func() {}
	}
	fw := &progressForwarder{ctx: ctx, srv: srv, token: token, every: f.cfg.ProgressInterval,
		n: firstOutputProgress - 1, max: outputProgressMax}
	unsubscribe, err := f.broker.SubscribeProgress(job.ID, fw.line)
	if err != nil {
		f.log.Debug("output progress", "job", job.ID, "err", err)
		return func() {}
	}
	job.Progress = true
	return func() { unsubscribe(); fw.flush() }
}
