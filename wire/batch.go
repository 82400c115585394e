package wire

import "strconv"

// Batch jobs: many jobs of one batch run (`codexec batch`), submitted in
// bulk, queued apart from interactive jobs and run only in a worker's idle
// slots, so that a batch filling the pool does not queue an agent's call
// behind it. A job of a cancelled batch that no worker started ends
// StatusCancelled.

// BatchSubject is the subject batch jobs for pool are published on. It has
// two tokens after the prefix, so the pool's consumer (one token) and the
// workers' own consumers (three) never take them.
func BatchSubject(pool string) string { return JobsSubjectPre + pool + ".batch" }

// BatchConsumerName is the durable consumer of BatchSubject shared by the
// workers of pool.
func BatchConsumerName(pool string) string { return "pool-" + pool + "-batch" }

// ParamsEnv is the environment variable that carries a batch job's
// parameter row (Job.Params, a JSON object) to its script.
const ParamsEnv = "CODEXEC_PARAMS"

// MaxParamsBytes bounds a batch job's encoded parameter row.
const MaxParamsBytes = 64 << 10

// OutputDirEnv is the environment variable that names a batch job's own
// output folder (Job.OutputDir), relative to the working directory.
const OutputDirEnv = "CODEXEC_OUTPUT_DIR"

// BatchOutputDir is the output folder of row of a batch.
func BatchOutputDir(row int64) string { return "out/" + strconv.FormatInt(row, 10) }
