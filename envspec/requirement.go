package envspec

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// MaxRequirementLen is the longest requirement string ParseRequirement
// accepts, in bytes.
const MaxRequirementLen = 200

// ErrBadRequirement is wrapped by every error of ParseRequirement, and so by
// the errors of Spec.Normalize and Derive for a bad package string.
var ErrBadRequirement = errors.New("not an acceptable package requirement")

// RequirementError says which package string was refused and why. The
// message is meant for the model or person who wrote the string.
type RequirementError struct {
	// Input is the refused string, as given.
	Input string
	// Reason says what is wrong with it, in plain words.
	Reason string
}

// Error names the input (quoted, so control characters show as escapes) and
// the reason.
func (e *RequirementError) Error() string {
	return fmt.Sprintf("invalid package requirement %q: %s", e.Input, e.Reason)
}

// Unwrap returns ErrBadRequirement.
func (e *RequirementError) Unwrap() error { return ErrBadRequirement }

// Requirement is one parsed package requirement (the PEP 508 subset that
// ParseRequirement accepts). Its fields hold canonical forms, so two
// requirements that mean the same thing compare equal field by field (apart
// from Name).
type Requirement struct {
	// Name is the distribution name as written ("Scikit_Learn").
	Name string
	// NormName is Name normalised by PEP 503: lower case, each run of "-",
	// "_" and "." replaced by one "-" ("scikit-learn").
	NormName string
	// Extras are the requested extras, normalised like names, sorted and
	// without duplicates; nil when there are none.
	Extras []string
	// Specifier is the version specifier: clauses such as ">=1.2" without
	// whitespace, in lower case, sorted, without duplicates, joined by ",";
	// "" when any version will do.
	Specifier string
	// Marker is the environment marker after ";", re-written with single
	// spaces and double quotes ("python_version < \"3.11\""); "" when none.
	Marker string
	// URL is the https URL of a "name @ URL" requirement; "" otherwise.
	URL string
}

// String returns the canonical form: the normalised name, extras in
// brackets, then the specifier or "@URL", then "; marker" (" ; marker"
// after a URL, as PEP 508 requires). It parses back to the same Requirement
// (Name then equal to NormName). Outside the marker it holds no whitespace.
func (r Requirement) String() string {
	var b strings.Builder
	b.WriteString(r.NormName)
	if len(r.Extras) > 0 {
		b.WriteString("[" + strings.Join(r.Extras, ",") + "]")
	}
	if r.URL != "" {
		b.WriteString("@" + r.URL)
		if r.Marker != "" {
			b.WriteString(" ; " + r.Marker)
		}
		return b.String()
	}
	b.WriteString(r.Specifier)
	if r.Marker != "" {
		b.WriteString("; " + r.Marker)
	}
	return b.String()
}

// CondaString returns the requirement as a conda match spec: the name in
// lower case (conda names keep their "_" and "."), then the specifier. It
// fails for what conda cannot express: extras, markers, URLs and "===".
func (r Requirement) CondaString() (string, error) {
	switch {
	case len(r.Extras) > 0:
		return "", &RequirementError{Input: r.String(), Reason: "conda packages have no extras; drop the [...] part"}
	case r.Marker != "":
		return "", &RequirementError{Input: r.String(), Reason: "conda packages take no environment markers; drop the ; part"}
	case r.URL != "":
		return "", &RequirementError{Input: r.String(), Reason: "conda packages cannot be installed from a URL"}
	case strings.Contains(r.Specifier, "==="):
		return "", &RequirementError{Input: r.String(), Reason: "conda has no arbitrary equality (===); use =="}
	}
	return strings.ToLower(r.Name) + r.Specifier, nil
}

// NormalizeName normalises a distribution name as PEP 503 does: lower case,
// every run of "-", "_" and "." replaced by a single "-".
func NormalizeName(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '-' || c == '_' || c == '.' {
			if i == 0 || !strings.ContainsRune("-_.", rune(name[i-1])) {
				b.WriteByte('-')
			}
			continue
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}

var (
	// nameRe is PEP 508's identifier: letters and digits at both ends, and
	// ".", "_", "-" inside.
	nameRe = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$`)

	// publicVersionRe is a PEP 440 public version without an epoch (epochs
	// are outside the accepted subset), after packaging's VERSION_PATTERN.
	publicVersionRe = `v?[0-9]+(?:\.[0-9]+)*` +
		`(?:[-_.]?(?:alpha|a|beta|b|preview|pre|c|rc)[-_.]?[0-9]*)?` +
		`(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?` +
		`(?:[-_.]?dev[-_.]?[0-9]*)?`
	localSuffixRe = `(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?`

	versionPublic = regexp.MustCompile(`^(?i)` + publicVersionRe + `$`)
	versionLocal  = regexp.MustCompile(`^(?i)` + publicVersionRe + localSuffixRe + `$`)
	versionPrefix = regexp.MustCompile(`^(?i)v?[0-9]+(?:\.[0-9]+)*$`)
	// compatibleRe: ~= needs at least two release segments.
	compatibleRe = regexp.MustCompile(`^(?i)v?[0-9]+(?:\.[0-9]+)+`)
	// arbitraryRe is what === may compare against, in this subset.
	arbitraryRe = regexp.MustCompile(`^[A-Za-z0-9._+-]+$`)
)

// specifierOps are the version operators, longest first so that "===" is
// not read as "==" followed by "=".
var specifierOps = []string{"===", "==", "!=", "<=", ">=", "~=", "<", ">"}

// headMetachars are refused outside a marker with a message that says they
// are shell metacharacters. "<", ">", "!", "*" and "=" are checked by the
// grammar instead: they are parts of version specifiers.
const headMetachars = "|&$`(){}?'\"\\#"

// archiveSuffixes mark a string pip would take for a local file name.
var archiveSuffixes = []string{".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tar.lz", ".tlz", ".gz", ".bz2", ".xz", ".egg"}

// ParseRequirement parses one package requirement from untrusted input and
// returns it in canonical form, or a *RequirementError (wrapping
// ErrBadRequirement) that names the input and says what is wrong.
//
// It accepts this subset of PEP 508:
//
//	name [extras] [specifiers] [; marker]
//	name [extras] @ https://host/path [; marker]   (only when allowURLs)
//
// where name is a distribution name, extras a bracketed comma list of
// names, specifiers a comma list of ==, !=, <=, >=, <, >, ~=, === clauses
// on PEP 440 versions (== and != may end in .*), and marker a PEP 508
// environment marker whose strings hold only letters, digits, spaces and
// ".", "_", "+", "*", ",", "-". Spaces are allowed around operators, commas
// and brackets, and are gone from the canonical form.
//
// It refuses, each with its own message: empty input and input longer than
// MaxRequirementLen; control and non-ASCII characters; options (anything
// starting with "-": --index-url, -e, -r); local paths (".", "/", "~", "\",
// "file:", "C:\", names ending in .whl, .tar.gz and the like); URLs, unless
// allowURLs and then https only, given as "name @ URL", without credentials
// or query; shell metacharacters (| & $ ` ( ) { } ? ' " \ #) outside a
// marker; a second whitespace-separated token ("numpy pandas"); version
// epochs (1!2.0); and anything else the grammar does not allow.
func ParseRequirement(s string, allowURLs bool) (Requirement, error) {
	bad := func(format string, args ...any) (Requirement, error) {
		return Requirement{}, &RequirementError{Input: s, Reason: fmt.Sprintf(format, args...)}
	}
	if strings.TrimSpace(s) == "" {
		return bad("empty; give a package name such as numpy or pandas>=2.1")
	}
	if len(s) > MaxRequirementLen {
		return bad("longer than %d characters", MaxRequirementLen)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\n' || c == '\r':
			return bad("contains a line break; give one requirement per item")
		case c == 0:
			return bad("contains a NUL byte")
		case c == '\t':
			return bad("contains a tab; use spaces")
		case c < 0x20 || c == 0x7f:
			return bad("contains the control character %q", string(c))
		case c >= 0x80:
			return bad("contains a non-ASCII character; package names and versions are ASCII")
		}
	}
	t := strings.TrimSpace(s)

	switch {
	case t[0] == '-':
		return bad("options are not accepted (only package requirements, such as numpy or pandas>=2.1)")
	case strings.ContainsRune("./~\\", rune(t[0])):
		return bad("local paths are not accepted; give a package name from the package index")
	case hasPrefixFold(t, "file:"):
		return bad("local files (file:) are not accepted; give a package name from the package index")
	case len(t) >= 3 && isLetter(t[0]) && t[1] == ':' && (t[2] == '\\' || t[2] == '/'):
		return bad("local paths are not accepted; give a package name from the package index")
	}

	// The marker is everything after the first ";": neither names,
	// versions nor accepted URLs hold one.
	head, marker, hasMarker := strings.Cut(t, ";")
	head = strings.TrimRight(head, " ")

	// A URL without "name @" in front of it.
	if i, at := strings.Index(head, "://"), strings.IndexByte(head, '@'); i >= 0 && (at < 0 || at > i) {
		if allowURLs {
			return bad("a URL must be given as name @ https://..., naming the package it provides")
		}
		return bad("URLs are not accepted; give a package name from the package index")
	}
	// The URL part, if any, is checked by checkURL.
	beforeURL := head
	if at := strings.IndexByte(head, '@'); at > 0 && !strings.ContainsAny(head[:at], "<>=!~") {
		beforeURL = head[:at]
	}
	if i := strings.IndexAny(beforeURL, headMetachars); i >= 0 {
		return bad("the shell metacharacter %q is not allowed in a package requirement", beforeURL[i])
	}

	p := reqParser{in: head}
	var r Requirement

	// Name.
	p.skipSpace()
	n := leadingNameLen(head[p.pos:])
	r.Name = head[p.pos : p.pos+n]
	p.pos += n
	if r.Name == "" {
		return bad("does not start with a package name")
	}
	if !nameRe.MatchString(r.Name) {
		return bad("%q is not a valid package name (letters, digits, and . _ - inside)", r.Name)
	}
	for _, suf := range archiveSuffixes {
		if strings.HasSuffix(strings.ToLower(r.Name), suf) {
			return bad("looks like a local file name (%s); give a package name from the package index", suf)
		}
	}
	r.NormName = NormalizeName(r.Name)
	if p.skipSpace(); p.done() {
		return finish(s, r, marker, hasMarker)
	}

	// Extras.
	if p.peek() == '[' {
		p.pos++
		closing := strings.IndexByte(head[p.pos:], ']')
		if closing < 0 {
			return bad("the extras have no closing ]")
		}
		list := head[p.pos : p.pos+closing]
		p.pos += closing + 1
		if strings.TrimSpace(list) != "" {
			for _, e := range strings.Split(list, ",") {
				e = strings.TrimSpace(e)
				if !nameRe.MatchString(e) {
					return bad("%q is not a valid extra name", e)
				}
				r.Extras = append(r.Extras, NormalizeName(e))
			}
			slices.Sort(r.Extras)
			r.Extras = slices.Compact(r.Extras)
		}
		if p.skipSpace(); p.done() {
			return finish(s, r, marker, hasMarker)
		}
	}

	// URL or version specifiers.
	switch c := p.peek(); {
	case c == '@':
		if !allowURLs {
			return bad("installing from a URL is not allowed here; give a package name from the package index")
		}
		p.pos++
		p.skipSpace()
		u, err := checkURL(strings.TrimSpace(head[p.pos:]))
		if err != "" {
			return bad("%s", err)
		}
		r.URL = u
		return finish(s, r, marker, hasMarker)
	case strings.IndexByte("<>=!~", c) >= 0:
		spec, err := parseSpecifiers(head[p.pos:])
		if err != "" {
			return bad("%s", err)
		}
		r.Specifier = spec
		return finish(s, r, marker, hasMarker)
	default:
		rest := strings.TrimSpace(head[p.pos:])
		if p.pos > 0 && head[p.pos-1] == ' ' {
			return bad("holds a second item %q after %q; give one package per item", firstField(rest), r.Name)
		}
		return bad("unexpected %q after %q; expected a version specifier such as >=1.2", firstField(rest), head[:p.pos])
	}
}

// finish parses the marker, if any, and returns r.
func finish(input string, r Requirement, marker string, hasMarker bool) (Requirement, error) {
	if !hasMarker {
		return r, nil
	}
	m, err := parseMarker(marker)
	if err != "" {
		return Requirement{}, &RequirementError{Input: input, Reason: `the environment marker after ";" is not valid: ` + err}
	}
	r.Marker = m
	return r, nil
}

// parseSpecifiers parses a comma list of version clauses and returns the
// canonical form, or a reason for refusing it.
func parseSpecifiers(s string) (string, string) {
	var clauses []string
	for raw := range strings.SplitSeq(s, ",") {
		c := strings.TrimSpace(raw)
		if c == "" {
			return "", "empty version clause in " + quote(s)
		}
		op := ""
		for _, o := range specifierOps {
			if strings.HasPrefix(c, o) {
				op = o
				break
			}
		}
		if op == "" && c[0] == '=' {
			return "", quote(c) + ": a single = is conda's syntax; use == (or ==1.2.* for a series)"
		}
		if op == "" {
			return "", quote(c) + " does not start with a version operator (==, !=, <=, >=, <, >, ~=, ===)"
		}
		v := strings.TrimSpace(c[len(op):])
		if v == "" {
			return "", "the operator " + op + " has no version"
		}
		if strings.ContainsAny(v, " ") {
			return "", "holds a second item " + quote(firstField(v[strings.IndexByte(v, ' '):])) + " after " + quote(op+firstField(v)) + "; give one package per item"
		}
		if reason := checkVersion(op, v); reason != "" {
			return "", reason
		}
		clauses = append(clauses, op+strings.ToLower(v))
	}
	slices.Sort(clauses)
	return strings.Join(slices.Compact(clauses), ","), ""
}

// checkVersion checks the version of one clause against its operator, as
// packaging's Specifier does, and returns a reason when it does not fit.
func checkVersion(op, v string) string {
	if strings.Contains(v, "!") {
		return "version epochs (" + quote(v) + ") are not supported"
	}
	switch op {
	case "===":
		if !arbitraryRe.MatchString(v) {
			return quote(v) + " is not a version"
		}
	case "==", "!=":
		if prefix, ok := strings.CutSuffix(v, ".*"); ok {
			if !versionPrefix.MatchString(prefix) {
				return quote(v) + ": a wildcard (.*) may only follow release numbers, as in 1.2.*"
			}
			return ""
		}
		if !versionLocal.MatchString(v) {
			return quote(v) + " is not a valid version (PEP 440)"
		}
	case "~=":
		if !versionPublic.MatchString(v) {
			return quote(v) + " is not a valid version for ~= (PEP 440, no local part, no wildcard)"
		}
		if !compatibleRe.MatchString(v) {
			return "~= needs at least two release numbers, as in ~=1.4"
		}
	default:
		if !versionPublic.MatchString(v) {
			return quote(v) + " is not a valid version for " + op + " (PEP 440, no local part, no wildcard)"
		}
	}
	return ""
}

// checkURL checks the URL of "name @ URL" and returns it, or a reason.
func checkURL(u string) (string, string) {
	if u == "" {
		return "", "no URL after @"
	}
	for i := 0; i < len(u); i++ {
		c := u[i]
		if !(isLetter(c) || isDigit(c) || strings.IndexByte("._~:/%@+=#-", c) >= 0) {
			if c == ' ' {
				return "", "holds a second item after the URL; give one package per item"
			}
			return "", fmt.Sprintf("the character %q is not allowed in a package URL", c)
		}
	}
	parsed, err := url.Parse(u)
	switch {
	case err != nil:
		return "", "not a valid URL"
	case parsed.Scheme != "https":
		return "", "only https URLs are accepted"
	case parsed.User != nil:
		return "", "credentials in URLs are not accepted"
	case parsed.Host == "" || parsed.Opaque != "":
		return "", "the URL has no host"
	}
	return u, ""
}

// leadingNameLen returns the length of the run of name characters at the
// start of s.
func leadingNameLen(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(isLetter(c) || isDigit(c) || c == '.' || c == '_' || c == '-') {
			return i
		}
	}
	return len(s)
}

func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return s
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool  { return '0' <= c && c <= '9' }

// reqParser walks a requirement's head.
type reqParser struct {
	in  string
	pos int
}

func (p *reqParser) done() bool { return p.pos >= len(p.in) }
func (p *reqParser) peek() byte { return p.in[p.pos] }
func (p *reqParser) skipSpace() {
	for p.pos < len(p.in) && p.in[p.pos] == ' ' {
		p.pos++
	}
}
