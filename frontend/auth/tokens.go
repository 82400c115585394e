package auth

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
)

// Tokens authenticates static API tokens against a file of their hashes.
// Each line of the file is
//
//	sha256:<64 hex digits> TENANT PRINCIPAL
//
// (blank lines and lines starting with # are ignored): the SHA-256 of a
// token, and whom it names. The file holds no token itself, so reading it
// gives no access. It is read again on Reload (SIGHUP) and, at most every
// CheckEvery, when its modification time or size has changed; a file that
// no longer parses leaves the tokens as they were, and is logged.
type Tokens struct {
	path       string
	checkEvery time.Duration
	log        *slog.Logger

	mu      sync.RWMutex
	entries []tokenEntry
	stamp   fileStamp

	lastCheck atomic.Int64 // unix nanoseconds of the last look at the file
}

type tokenEntry struct {
	hash [sha256.Size]byte
	id   Identity
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// DefaultCheckEvery is how often Tokens looks at its file's modification time.
const DefaultCheckEvery = time.Second

// LoadTokens reads the token file at path. checkEvery 0 means DefaultCheckEvery.
func LoadTokens(path string, checkEvery time.Duration, log *slog.Logger) (*Tokens, error) {
	if checkEvery <= 0 {
		checkEvery = DefaultCheckEvery
	}
	if log == nil {
		log = slog.Default()
	}
	t := &Tokens{path: path, checkEvery: checkEvery, log: log}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload reads the file again. On error the tokens are left as they were.
func (t *Tokens) Reload() error {
	st, err := os.Stat(t.path)
	if err != nil {
		return fmt.Errorf("auth: token file: %w", err)
	}
	data, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("auth: token file: %w", err)
	}
	entries, err := parseTokenFile(data)
	if err != nil {
		return fmt.Errorf("auth: token file %s: %w", t.path, err)
	}
	t.mu.Lock()
	t.entries, t.stamp = entries, fileStamp{st.ModTime(), st.Size()}
	t.mu.Unlock()
	t.log.Info("token file loaded", "path", t.path, "tokens", len(entries))
	return nil
}

// Len is the number of tokens loaded.
func (t *Tokens) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.entries)
}

// Authenticate implements Authenticator. The token's hash is compared with
// every entry in constant time, so that neither the time taken nor an early
// exit says how much of a guess matched.
func (t *Tokens) Authenticate(r *http.Request) (Identity, error) {
	token, err := bearerToken(r)
	if err != nil {
		return Identity{}, err
	}
	t.reloadIfChanged()
	sum := sha256.Sum256([]byte(token))
	t.mu.RLock()
	defer t.mu.RUnlock()
	var found Identity
	match := 0
	for i := range t.entries {
		eq := subtle.ConstantTimeCompare(sum[:], t.entries[i].hash[:])
		if eq == 1 {
			found = t.entries[i].id
		}
		match |= eq
	}
	if match == 0 {
		return Identity{}, errors.New("auth: unknown token")
	}
	return found, nil
}

// reloadIfChanged reads the file again when its modification time or size
// changed, looking at most once per checkEvery.
func (t *Tokens) reloadIfChanged() {
	now := time.Now().UnixNano()
	last := t.lastCheck.Load()
	if now-last < int64(t.checkEvery) || !t.lastCheck.CompareAndSwap(last, now) {
		return
	}
	st, err := os.Stat(t.path)
	if err != nil {
		t.log.Warn("token file unreadable; keeping the tokens loaded", "path", t.path, "err", err)
		return
	}
	t.mu.RLock()
	same := t.stamp == fileStamp{st.ModTime(), st.Size()}
	t.mu.RUnlock()
	if same {
		return
	}
	if err := t.Reload(); err != nil {
		t.log.Warn("token file changed but does not load; keeping the tokens loaded", "err", err)
	}
}

// parseTokenFile reads the lines of a token file.
func parseTokenFile(data []byte) ([]tokenEntry, error) {
	var entries []tokenEntry
	// A token on two lines that name different identities is refused: it
	// was taken for the last line's, so a line copied for another tenant
	// and left with the old hash moved that token there, silently.
	lines := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		e, err := parseTokenLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if first, ok := lines[e.hash]; ok {
			if entries[first].id != e.id {
				return nil, fmt.Errorf("line %d: the token of an earlier line, for another tenant or principal", n)
			}
			continue
		}
		lines[e.hash] = len(entries)
		entries = append(entries, e)
	}
	return entries, sc.Err()
}

func parseTokenLine(line string) (tokenEntry, error) {
	fields := strings.Fields(line)
	if len(fields) != 3 {
		return tokenEntry{}, errors.New("want: sha256:<hex> TENANT PRINCIPAL")
	}
	hexSum, ok := strings.CutPrefix(fields[0], "sha256:")
	if !ok {
		return tokenEntry{}, errors.New("the hash must start with sha256:")
	}
	var e tokenEntry
	if n, err := hex.Decode(e.hash[:], []byte(hexSum)); err != nil || n != sha256.Size || len(hexSum) != 2*sha256.Size {
		return tokenEntry{}, errors.New("the hash is not 64 hex digits")
	}
	e.id = Identity{Tenant: fields[1], Principal: fields[2]}
	if !validName(e.id.Tenant) || !validName(e.id.Principal) {
		return tokenEntry{}, errors.New("a tenant or principal has characters other than printable ones, or over 256 bytes")
	}
	return e, nil
}

// validName: a tenant or principal printed in logs as it is.
func validName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// NewToken returns a new random API token (256 bits) and its line for a
// token file naming tenant and principal.
func NewToken(tenant, principal string) (token, line string, err error) {
	if !validName(tenant) || !validName(principal) {
		return "", "", errors.New("auth: tenant and principal must be printable, without spaces, at most 256 bytes")
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	token = "cx_" + base64.RawURLEncoding.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(token))
	return token, fmt.Sprintf("sha256:%x %s %s", sum, tenant, principal), nil
}
