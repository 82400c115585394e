package batch

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A batch's directory holds all the client knows of it, so that it can be
// resumed, followed or cancelled from another terminal or a later day:
//
//	batch.json       the batch: its id, input and options
//	submitted.jsonl  one line per job submitted (row, attempt, job id), appended before the jobs are sent
//	results.jsonl    one line per row finished, appended as results come
//	jobs/NAME/       per row: stdout, stderr, status.json and files/ (what it wrote to its output folder)
//	cancel           present once the batch was cancelled
//
// A row is done once its line is in results.jsonl; its files are written
// before that line.

// Spec is a batch as batch.json holds it.
type Spec struct {
	ID       string           `json:"id"`
	Created  time.Time        `json:"created"`
	Input    Input            `json:"input"`
	Python   string           `json:"python,omitempty"`
	Packages []string         `json:"packages,omitempty"`
	Timeout  float64          `json:"timeout_seconds,omitempty"`
	Limits   map[string]int64 `json:"limits,omitempty"`
	Retries  int              `json:"retries"`
	// URL is the frontend the batch runs through; empty: embedded.
	URL string `json:"url,omitempty"`
}

// Line is one line of results.jsonl.
type Line struct {
	Row        int64           `json:"row"`
	Name       string          `json:"name"`
	JobID      string          `json:"job_id"`
	Attempt    int64           `json:"attempt"`
	Status     string          `json:"status"`
	ExitCode   int             `json:"exit_code"`
	DurationMS float64         `json:"duration_ms"`
	WorkerID   string          `json:"worker_id,omitempty"`
	Limit      string          `json:"limit,omitempty"`
	Message    string          `json:"message,omitempty"`
	Params     json.RawMessage `json:"params,omitempty"`
	// Files are the files the job wrote to its output folder, copied to
	// jobs/NAME/files/; Notes say what was left out.
	Files []string `json:"files,omitempty"`
	Notes []string `json:"notes,omitempty"`
}

// submission is one line of submitted.jsonl.
type submission struct {
	Row     int64  `json:"row"`
	Attempt int64  `json:"attempt"`
	JobID   string `json:"job_id"`
}

// state is a batch's directory, open.
type state struct {
	dir  string
	spec Spec
	// done holds the rows with a line in results.jsonl, failed those of
	// them whose status is not ok.
	done   map[int64]bool
	failed int64
	// sent is each row's latest submission.
	sent      map[int64]submission
	journal   *os.File
	results   *os.File
	resultsWr *bufio.Writer
}

const (
	specFile      = "batch.json"
	submittedFile = "submitted.jsonl"
	resultsFile   = "results.jsonl"
	cancelFile    = "cancel"
)

// newID is a new batch id: random, so that it cannot be guessed.
func newID() string { return strings.ToLower(rand.Text()) }

// create makes dir a new batch's directory, unless it is one already (a
// batch resumed), and opens it.
func create(dir string, spec Spec) (*state, error) {
	if err := os.MkdirAll(filepath.Join(dir, "jobs"), 0o755); err != nil {
		return nil, err
	}
	p := filepath.Join(dir, specFile)
	if _, err := os.Stat(p); err == nil {
		return open(dir)
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(p, append(data, '\n')); err != nil {
		return nil, err
	}
	return open(dir)
}

// open reads the batch's directory dir.
func open(dir string) (*state, error) {
	data, err := os.ReadFile(filepath.Join(dir, specFile))
	if err != nil {
		return nil, fmt.Errorf("%s is not a batch's directory: %w", dir, err)
	}
	s := &state{dir: dir, done: map[int64]bool{}, sent: map[int64]submission{}}
	if err := json.Unmarshal(data, &s.spec); err != nil {
		return nil, fmt.Errorf("%s: %w", specFile, err)
	}
	if err := eachLine(filepath.Join(dir, resultsFile), func(l Line) {
		if !s.done[l.Row] {
			s.done[l.Row] = true
			if l.Status != "ok" {
				s.failed++
			}
		}
	}); err != nil {
		return nil, err
	}
	if err := eachLine(filepath.Join(dir, submittedFile), func(sub submission) {
		if prev, ok := s.sent[sub.Row]; !ok || sub.Attempt >= prev.Attempt {
			s.sent[sub.Row] = sub
		}
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// eachLine calls fn with each decodable line of a JSON Lines file; a last
// line cut short (the client killed while writing it) is skipped.
func eachLine[T any](path string, fn func(T)) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var v T
		if json.Unmarshal(sc.Bytes(), &v) == nil {
			fn(v)
		}
	}
	return sc.Err()
}

// openForAppend opens the journal and the results for appending.
func (s *state) openForAppend() error {
	var err error
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if s.journal, err = os.OpenFile(filepath.Join(s.dir, submittedFile), flags, 0o644); err != nil {
		return err
	}
	if s.results, err = os.OpenFile(filepath.Join(s.dir, resultsFile), flags, 0o644); err != nil {
		return err
	}
	s.resultsWr = bufio.NewWriter(s.results)
	return nil
}

// Close flushes and closes what openForAppend opened.
func (s *state) Close() error {
	var errs []error
	if s.resultsWr != nil {
		errs = append(errs, s.resultsWr.Flush())
	}
	for _, f := range []*os.File{s.journal, s.results} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}

// recordSent appends subs to the journal and syncs it: a job's id is on
// disk before the job is sent.
func (s *state) recordSent(subs []submission) error {
	var b []byte
	for _, sub := range subs {
		line, _ := json.Marshal(sub)
		b = append(append(b, line...), '\n')
		s.sent[sub.Row] = sub
	}
	if _, err := s.journal.Write(b); err != nil {
		return err
	}
	return s.journal.Sync()
}

// jobResult is a finished job as the frontend reports it.
type jobResult struct {
	JobID      string  `json:"job_id"`
	Status     string  `json:"status"`
	ExitCode   int     `json:"exit_code"`
	Stdout     string  `json:"stdout"`
	Stderr     string  `json:"stderr"`
	DurationMS float64 `json:"duration_ms"`
	WorkerID   string  `json:"worker_id"`
	Limit      string  `json:"limit"`
	Message    string  `json:"message"`
	// Files and Notes: the files written below the job's output folder,
	// and what was left out of them.
	Files []string `json:"files"`
	Notes []string `json:"notes"`
	// RetryAfterMS: a deferred job may be submitted again after it.
	RetryAfterMS int64 `json:"retry_after_ms"`
	// collected are the files copied to jobs/NAME/files/ (collectFiles).
	collected []string
}

// finish writes row r's files, then its line in results.jsonl.
func (s *state) finish(r row, attempt int64, res jobResult) error {
	dir := filepath.Join(s.dir, "jobs", r.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	l := Line{Row: r.N, Name: r.Name, JobID: res.JobID, Attempt: attempt, Status: res.Status, ExitCode: res.ExitCode,
		DurationMS: res.DurationMS, WorkerID: res.WorkerID, Limit: res.Limit, Message: res.Message, Params: r.Params,
		Files: res.collected, Notes: res.Notes}
	status, _ := json.MarshalIndent(l, "", "  ")
	for name, data := range map[string][]byte{"stdout": []byte(res.Stdout), "stderr": []byte(res.Stderr), "status.json": append(status, '\n')} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	line, _ := json.Marshal(l)
	if _, err := s.resultsWr.Write(append(line, '\n')); err != nil {
		return err
	}
	s.done[r.N] = true
	if l.Status != "ok" {
		s.failed++
	}
	return nil
}

// flush writes the buffered results lines out.
func (s *state) flush() error { return s.resultsWr.Flush() }

// cancelled says whether the batch's cancel mark is there.
func (s *state) cancelled() bool {
	_, err := os.Stat(filepath.Join(s.dir, cancelFile))
	return err == nil
}

// markCancelled leaves the cancel mark.
func markCancelled(dir string) error {
	return os.WriteFile(filepath.Join(dir, cancelFile), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644)
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// index records where each batch's directory is, by id, under root, so
// that status, results and cancel find a batch by its id.
type index struct{ root string }

func (x index) path(id string) string { return filepath.Join(x.root, "batches", id) }

func (x index) add(id, dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(x.path(id)), 0o700); err != nil {
		return err
	}
	return writeFileAtomic(x.path(id), []byte(abs+"\n"))
}

// resolve returns the directory of the batch named by arg: a batch's
// directory, or a batch id the index knows.
func (x index) resolve(arg string) (string, error) {
	if _, err := os.Stat(filepath.Join(arg, specFile)); err == nil {
		return arg, nil
	}
	if strings.ContainsAny(arg, `/\.`) {
		return "", fmt.Errorf("%s is not a batch's directory", arg)
	}
	data, err := os.ReadFile(x.path(arg))
	if err != nil {
		return "", fmt.Errorf("no batch %s known here (give its directory instead)", arg)
	}
	return strings.TrimSpace(string(data)), nil
}
