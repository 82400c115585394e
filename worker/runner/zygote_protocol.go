package runner

// The Go side of the zygote's control protocol: the messages the worker and
// a zygote exchange on the zygote's fd 3, one JSON object per datagram.
// zygote_protocol.md describes the protocol for readers and
// zygote_protocol.json for machines; zygote.py is the other side. Both
// sides are checked against zygote_protocol.json: this file's structs by
// TestZygoteProtocolGo (it reflects over their JSON tags), zygote.py by
// testdata/test_zygote.py (which drives it without Go), so a field added
// to one side alone fails a test.

// The ops: a message's "op" field says which message it is.
const (
	// zygote -> worker
	opReady   = "ready"   // once, first: the preloads are imported
	opStarted = "started" // a job was handed to a process
	opFailed  = "failed"  // a job could not start: nothing ran
	opExited  = "exited"  // a job's process group is gone
	// worker -> zygote
	opRun  = "run"  // run a job (with its stdin, stdout and stderr)
	opKill = "kill" // SIGKILL a job's process group
)

// zygoteMsg is one message from the zygote: ready, started, failed or
// exited. Which fields are set depends on Op.
type zygoteMsg struct {
	Op        string            `json:"op"`
	ID        uint64            `json:"id"`
	PID       int               `json:"pid"`
	Status    int               `json:"status"`
	Error     string            `json:"error"`
	Python    string            `json:"python"`
	Preloaded []string          `json:"preloaded"`
	Failed    map[string]string `json:"failed"`
	Threads   []string          `json:"threads"`
	ImportMS  float64           `json:"import_ms"`
	Keeper    bool              `json:"keeper"`
}

// zygoteRunHeader is the first part of a run request: all that the zygote
// itself reads of it. The datagram is this object, a newline, then the
// job's zygoteJob, which the zygote hands to the job's process without
// decoding it: nothing of a session's request is ever decoded in the
// zygote, whose memory every later job of every session starts with. The
// request travels with three descriptors (SCM_RIGHTS): the job's stdin,
// stdout and stderr, in that order.
type zygoteRunHeader struct {
	Op string `json:"op"`
	ID uint64 `json:"id"`
	// Net is the key of the job's session's network namespace: an opaque
	// token (netToken), never the session's name.
	Net string `json:"net,omitempty"`
	// Unmount is Confinement.Unmount: the zygote takes those directories
	// out of its own view, once, ahead of the spares.
	Unmount []string `json:"unmount,omitempty"`
	// Context says the job is a context's interpreter (Interp): the
	// zygote prepares spares while it waits between calls.
	Context bool `json:"context,omitempty"`
	// Clones is how many descriptors travel after the three: the mount
	// clones of the job's Confinement.Binds, in their order, where the
	// sandbox's Clones says the worker sends them.
	Clones int `json:"clones,omitempty"`
}

// zygoteJob is the second part of a run request: what the job's process
// reads.
type zygoteJob struct {
	Script  string       `json:"script"`
	Dir     string       `json:"dir"`
	Env     []string     `json:"env"`
	Rlimits [][3]int64   `json:"rlimits,omitempty"`
	Confine *Confinement `json:"confine,omitempty"`
}

// zygoteKill asks the zygote to SIGKILL the process group of job ID.
type zygoteKill struct {
	Op string `json:"op"`
	ID uint64 `json:"id"`
}

// zygoteConfig is the zygote's command-line configuration (its argv[1]
// after the bootstrap).
type zygoteConfig struct {
	Preload []string          `json:"preload"`
	Sandbox *zygoteSandboxCfg `json:"sandbox,omitempty"`
}

type zygoteSandboxCfg struct {
	// NetNS puts each job in a network namespace with a loopback only:
	// one per session (Confinement.Session), made by the zygote on the
	// session's first job and joined by the session's later ones, so that
	// jobs of different sessions cannot talk to each other; one per child
	// where the zygote cannot setns(2) back to its own network namespace.
	NetNS bool `json:"netns"`
	// Hidden are SandboxConfig.Hidden.
	Hidden []string `json:"hidden"`
	// Keep are the sandbox's other mounts under /tmp, as [path, write]:
	// each child puts a fresh tmpfs on /tmp and binds them back.
	Keep []Bind `json:"keep,omitempty"`
	// Rootless says the zygote is not root, but its user namespace's: its
	// jobs keep its uid (they drop the namespace's capabilities), /proc
	// cannot be remounted, and leftovers are not told apart by uid.
	Rootless bool `json:"rootless,omitempty"`
	// Seccomp is SandboxConfig.Seccomp, base64 in the JSON (as
	// encoding/json writes a []byte): each job's process installs it.
	Seccomp []byte `json:"seccomp,omitempty"`
	// Spares is how many children the zygote keeps prepared ahead of
	// jobs; 0 (absent) means the zygote's default, two.
	Spares int `json:"spares,omitempty"`
	// InterpreterInit makes each spare the init of its PID namespace,
	// forking the job's process, as where the small init cannot run (two
	// forks of the interpreter per job): SandboxConfig.interpreterInit.
	InterpreterInit bool `json:"interpreter_init,omitempty"`
	// Clones says each job's directories come with its run request as
	// mount clones (open_tree(2)), which the job's process attaches
	// (move_mount(2)): the spares take every session's directories out of
	// their view ahead of the job instead of binding the job's own from
	// them and taking the rest out on the job's path. Absent: the spares
	// keep descriptors on the hidden roots and bind from them.
	Clones bool `json:"clones,omitempty"`
}
