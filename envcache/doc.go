// Package envcache builds and keeps the Python environments that jobs run
// in: the managers that build one (venv, uv, conda), confined, and the
// on-disk cache of a worker that builds each at most once and evicts the
// least recently used within a disk budget. What an environment is (an
// envspec.Spec and its identity), requirement parsing and placement are
// package envspec, which the frontend imports without linking these
// builders. Nothing here knows NATS or Redis; the worker wires it up.
//
// # Managers
//
// A Manager builds one kind of environment: Venv (python -m venv, then
// pip), UV (uv venv, then uv pip, with its cache on the same file system so
// that installs are hard links and UV_PYTHON_DOWNLOADS=never), Conda
// (conda, mamba or micromamba, by prefix, Python and packages in one solve,
// JSON output parsed, errors as *CondaError). Jobs run with the
// environment's bin/python and the variables of its Activation
// (VIRTUAL_ENV, or CONDA_PREFIX and CONDA_DEFAULT_ENV, and its bin first on
// PATH), never through `conda run` or an activate script.
//
// Installed lists the distributions in an environment by reading their
// metadata in site-packages (dist-info or egg-info: name, version, and
// top_level.txt or RECORD for the import names), without starting Python,
// so envspec.Lookup answers for "scikit-learn" and "sklearn" alike without running
// any package's import-time code.
//
// # Confined builds
//
// Installing a package runs its code: an sdist's build backend (setup.py)
// runs while pip or uv builds it. Config.Confine (a Confiner, passed on
// to each manager as CreateRequest.Confine) wraps every command of a
// build so that it runs in a sandbox; envcache itself knows no sandbox
// (a worker builds the Confiner from worker/sandbox, with the network,
// since installers need the package index). Each command gets the lists
// of what it must read and may write:
//
//	python -m venv DIR      reads the base interpreter's installation;
//	                        writes DIR
//	DIR/bin/python -m pip   reads that and the local index directories;
//	                        writes DIR and the pip cache
//	uv venv, uv pip install read uv, the base interpreter's installation
//	                        and the local index directories; write DIR and
//	                        the uv cache
//	conda/mamba/micromamba  read the executable and its installation (or
//	create                  micromamba's root prefix); write DIR and the
//	                        package caches (CONDA_PKGS_DIRS, else pkgs in
//	                        the root prefix)
//
// and every one of them writes a scratch directory of its build, which
// is its HOME and TMPDIR and is removed afterwards. DIR is created empty
// first, so that it can be bound. A confined command keeps of the worker's
// environment only what installers need (PATH, locale, proxies,
// certificate paths, PIP_*, UV_*, CONDA_*, MAMBA_*): the worker's secrets
// stay out of a build's reach, and pip's and conda's per-user
// configuration files are named by PIP_CONFIG_FILE and CONDARC instead of
// being found in HOME. Two things change with confinement: a venv is
// never built from a seed (pip, run from the seed's copy as the child's
// interpreter, would run the seed's packages' .pth lines and any file a
// wheel wrote over pip's own in the sandbox, which has the network and
// the shared caches), and uv
// copies from its cache instead of hard-linking (UV_LINK_MODE=copy unless
// UV.LinkMode says otherwise), since a hard link across the sandbox's
// separate mounts fails even on one file system.
//
// Not confined: the probes of the worker's own interpreters
// (ResolvePython runs python -E -S with a fixed script), uv and conda
// --version, pyenv which, conda list and env list (they read metadata and
// run no code of an environment's packages) and the default venv of
// EnsureVenv (the operator's interpreter, no user's package). The package
// caches are shared and writable by every build, so a hostile build can
// still put bad files there for later builds to install; keeping that out
// needs a cache per trust domain.
//
// # The cache
//
// A Cache lives in one directory, which several worker processes on a
// machine may share:
//
//	envs/<id>/         the environment (built in place: venvs and conda
//	                   prefixes hold their absolute path)
//	meta/<id>.json     its metadata, written last: present means ready
//	                   (spec, interpreter, size, build time, last use)
//	locks/<id>.lock    its lock file (kept: removing a lock file races)
//	trash/             what is being deleted; renamed here first
//	uv-cache/, pip-cache/   the installers' caches (default managers)
//
// Cache.Ensure returns a held *Env. Within a process, concurrent callers
// for one ID share one build (a flight): each waits until its own ctx ends
// and gets the installer's output from when it joined; the build is
// cancelled only when the last waiter has gone. Across processes, flock on
// the ID's lock file decides: an environment in use holds a shared lock
// (every holder, in every process); building and evicting take the
// exclusive one, so a build runs once and nothing in use is ever evicted.
// A build that fails is remembered for Config.FailureTTL, so a broken spec
// fails fast instead of rebuilding on every job; the error is a
// *BuildError with the installer's own output (head and tail, 64 KiB at
// most).
//
// After each build and each last release, the cache measures itself
// against Config.BudgetBytes (sizes measured like du after each build,
// hard links within an environment counted once, links into uv's cache in
// full) and evicts unused environments, least recently used first (last
// use is recorded in the metadata at most once a minute per environment).
// Evicting removes the metadata first, then moves the directory to trash.
// On start a sweep removes what interrupted builds and evictions left.
//
// Derived environments are cheap to build: for uv, the child is a new
// venv whose packages are hard-linked from uv's warm cache (tens of
// milliseconds); for venv, when builds are not confined, a child whose
// parent is ready in the cache is made without pip and seeded with a
// hard-linked copy of the parent (its
// bin scripts rewritten to name the child), then pip installs the full set,
// which only fetches what is new: about half a second instead of the
// seconds of ensurepip and a full install. Hard links mean an environment
// shares files with uv's cache or its parent; files are replaced, never
// written in place, by pip, uv and the import system, but a job writing
// into installed files in place would change them for all: jobs should not
// be able to write to the cache.
//
// Cache.Held lists the IDs ready on disk (and the existing environments
// resolved), for a worker's advert; Cache.Capabilities lists its available
// managers and interpreter versions.
//
// New makes a Cache and Start opens it (its directories, the sweep); Stop
// refuses new work, lets builds in progress finish while its context
// lasts, then cancels them (the contract of package internal/lifecycle).
// Env.Built says whether Ensure built the environment or found it ready on
// disk, whoever built it and whenever.
//
// The cache's code is split by concern: config.go (Config and its
// defaults), cache.go (the Cache, its lifecycle, Ensure and Env), build.go
// (single-flight builds and seeding, under the locks of lock_unix.go),
// evict.go (the budget, eviction and the start-up sweep), meta.go (the
// metadata files), capabilities.go (the managers and interpreters a worker
// advertises) and fanout.go (a build's output to every waiter).
//
// # The default environment
//
// EnsureVenv, ExistingVenv and ResolvePython predate the cache and still
// serve a worker's default venv: ResolvePython finds an interpreter by
// path, name or version (resolving pyenv shims), EnsureVenv builds a venv
// once under a lock file with a ready marker, ExistingVenv checks an
// operator's venv.
package envcache
