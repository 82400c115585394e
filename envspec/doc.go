// Package envspec is the vocabulary of environments that frontends and
// workers share: what an environment is (Spec) and its content-addressed
// identity, the package requirements codexec accepts from a model
// (ParseRequirement), the installed distributions a worker reports (Dist,
// Lookup), a worker's presence record (Advert, with its Capabilities) and
// placement (Choose). It imports nothing of codexec's: the frontend uses it
// without linking the builders of package envcache, and package wire
// carries a Spec in every job.
//
// # Specs and identity
//
// A Spec names a manager, a Python version ("" for the worker's default),
// and a package set; or an environment that already exists on the workers
// (Existing: a venv path, a conda name or prefix). Spec.Normalize turns it
// into its canonical form: the manager in lower case, every package parsed
// by ParseRequirement and rewritten canonically (PEP 503 names, sorted
// extras, specifiers without whitespace), duplicates removed, sorted.
// Spec.Canonical encodes that as compact JSON with a format version, and
// Spec.ID hashes it ("env-" and 16 hex digits of SHA-256): two specs with
// the same ID are the same environment, on every worker. Spec.Parent is
// informational and not part of the identity.
//
// Environments are never modified. Installing packages into a session's
// environment is Derive(parent, extra): a new spec with the parent's
// packages and the extra ones (a requirement in extra replaces the parent's
// for the same name), which the cache builds like any other. Derive refuses
// an Existing parent (ErrExistingEnv): codexec does not install into an
// environment the operator made, and there is no honest way to layer a new
// environment over one (a venv made with --system-site-packages sees its
// base interpreter's packages, not a parent venv's).
//
// # Untrusted package strings
//
// No user string reaches a shell: every command runs from an argv list,
// requirements come after "--" for pip and uv, and installers run in the
// cache's own directory. ParseRequirement accepts only a PEP 508 subset
// (name, extras, version specifiers, an environment marker, and "name @
// https://..." when URLs are allowed) and refuses everything else with a
// *RequirementError that names the input and the reason: options such as
// --index-url or -e, local paths and file names, other URLs, shell
// metacharacters, a second whitespace-separated item, over-long or
// non-ASCII input. FuzzParseRequirement checks that what it accepts never
// starts with "-", holds no metacharacter or whitespace outside its marker,
// and parses back to itself.
//
// # Placement
//
// An Advert is a worker's presence record (who it is, its capabilities,
// the environments it holds, its load), renewed at every heartbeat;
// DecodeAdverts reads a presence set's members. Choose picks a worker for a spec: the least loaded live worker
// holding it, else the least loaded one able to build it (the manager, and
// for venv and uv an interpreter of the version), else an error wrapping
// ErrNoWorker that says what is missing on which worker. An existing
// environment goes only to workers that hold or advertise it.
package envspec
