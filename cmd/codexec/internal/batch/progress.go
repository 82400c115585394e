package batch

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Progress: on a terminal, one bar redrawn in place (progressbar/v3: a
// small, maintained library that sizes the bar to the terminal and redraws
// it throttled, with nothing to set up for a single bar); elsewhere (a pipe,
// a file, CI logs) one plain line every interval. Either way the counts are
// the same: ok and failed (rows finished in this run or before), running
// (submitted and not finished: queued on the cluster or running there),
// queued (not submitted yet), the rate of this run and the time left at it.

// counts are a batch's progress at one moment.
type counts struct {
	total, ok, failed, running int64
	// finishedHere is how many rows this run finished, started when it began.
	finishedHere int64
	start        time.Time
}

func (c counts) finished() int64 { return c.ok + c.failed }

func (c counts) queued() int64 { return max(0, c.total-c.finished()-c.running) }

// rate is this run's finished rows per second.
func (c counts) rate() float64 {
	el := time.Since(c.start).Seconds()
	if el <= 0 {
		return 0
	}
	return float64(c.finishedHere) / el
}

// eta is the time left at this run's rate; 0 when unknown.
func (c counts) eta() time.Duration {
	r := c.rate()
	if r <= 0 {
		return 0
	}
	return time.Duration(float64(c.total-c.finished()) / r * float64(time.Second)).Round(time.Second)
}

// summary is the counts in words.
func (c counts) summary() string {
	eta := "?"
	if d := c.eta(); d > 0 || c.finished() == c.total {
		eta = d.String()
	}
	return fmt.Sprintf("ok %d, failed %d, running %d, queued %d | %.1f jobs/s, eta %s",
		c.ok, c.failed, c.running, c.queued(), c.rate(), eta)
}

// progress shows counts.
type progress interface {
	show(c counts)
	// done shows the final counts and ends the display.
	done(c counts)
}

// newProgress returns a bar when out is a terminal, plain lines every
// interval otherwise.
func newProgress(out io.Writer, id string, total int64, interval time.Duration) progress {
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return &barProgress{out: out, bar: progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(out),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(false),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionFullWidth(),
		)}
	}
	return &lineProgress{out: out, id: id, every: interval}
}

// barProgress is the terminal's bar.
type barProgress struct {
	out io.Writer
	bar *progressbar.ProgressBar
}

func (p *barProgress) show(c counts) {
	p.bar.Describe(c.summary())
	_ = p.bar.Set64(c.finished())
}

func (p *barProgress) done(c counts) {
	p.show(c)
	_ = p.bar.Finish()
	_, _ = fmt.Fprintln(p.out)
}

// lineProgress writes a line every interval.
type lineProgress struct {
	out   io.Writer
	id    string
	every time.Duration
	last  time.Time
}

func (p *lineProgress) show(c counts) {
	if time.Since(p.last) < p.every {
		return
	}
	p.last = time.Now()
	p.line(c)
}

func (p *lineProgress) done(c counts) { p.line(c) }

func (p *lineProgress) line(c counts) {
	_, _ = fmt.Fprintf(p.out, "batch %s: %d/%d finished: %s\n", p.id, c.finished(), c.total, c.summary())
}
