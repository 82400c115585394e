package envspec

import (
	"fmt"
	"strings"
)

// markerVars are the environment marker variables of PEP 508.
var markerVars = map[string]bool{
	"python_version": true, "python_full_version": true, "os_name": true, "sys_platform": true,
	"platform_release": true, "platform_system": true, "platform_version": true,
	"platform_machine": true, "platform_python_implementation": true,
	"implementation_name": true, "implementation_version": true, "extra": true,
}

// markerStringChars are the characters a quoted marker string may hold in
// the accepted subset: enough for versions and platform names.
const markerStringChars = " ._+*,-"

// parseMarker parses a PEP 508 environment marker and returns its canonical
// form (single spaces, double quotes, parentheses where written), or a
// reason for refusing it.
//
//	marker := and ("or" and)*
//	and    := atom ("and" atom)*
//	atom   := "(" marker ")" | value op value
//	value  := variable | quoted string
//	op     := "<" | "<=" | "!=" | "==" | ">=" | ">" | "~=" | "===" | "in" | "not in"
func parseMarker(s string) (string, string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isLetter(c) || isDigit(c) || strings.IndexByte(" ()._-*+!~=<>'\",", c) >= 0:
		case strings.IndexByte("|&$`{}?;\\#", c) >= 0:
			return "", fmt.Sprintf("the shell metacharacter %q is not allowed", c)
		default:
			return "", fmt.Sprintf("the character %q is not allowed", c)
		}
	}
	if strings.TrimSpace(s) == "" {
		return "", "empty marker after ;"
	}
	p := markerParser{in: s}
	var b strings.Builder
	if err := p.or(&b); err != "" {
		return "", err
	}
	if tok := p.next(); tok != "" {
		return "", fmt.Sprintf("unexpected %q", tok)
	}
	return b.String(), ""
}

// markerParser is a recursive-descent parser that writes the canonical form
// as it goes.
type markerParser struct {
	in  string
	pos int
	tok string // a token read by peek and not yet consumed
}

func (p *markerParser) or(b *strings.Builder) string {
	if err := p.and(b); err != "" {
		return err
	}
	for p.peek() == "or" {
		p.next()
		b.WriteString(" or ")
		if err := p.and(b); err != "" {
			return err
		}
	}
	return ""
}

func (p *markerParser) and(b *strings.Builder) string {
	if err := p.atom(b); err != "" {
		return err
	}
	for p.peek() == "and" {
		p.next()
		b.WriteString(" and ")
		if err := p.atom(b); err != "" {
			return err
		}
	}
	return ""
}

func (p *markerParser) atom(b *strings.Builder) string {
	if p.peek() == "(" {
		p.next()
		b.WriteString("(")
		if err := p.or(b); err != "" {
			return err
		}
		if tok := p.next(); tok != ")" {
			return "missing )"
		}
		b.WriteString(")")
		return ""
	}
	lhs, err := p.value()
	if err != "" {
		return err
	}
	op := p.next()
	switch op {
	case "<", "<=", "!=", "==", ">=", ">", "~=", "===", "in":
	case "not":
		if p.next() != "in" {
			return `"not" must be followed by "in"`
		}
		op = "not in"
	case "":
		return fmt.Sprintf("%s is compared with nothing", lhs)
	default:
		return fmt.Sprintf("%q is not a marker operator", op)
	}
	rhs, err := p.value()
	if err != "" {
		return err
	}
	b.WriteString(lhs + " " + op + " " + rhs)
	return ""
}

// value reads a variable or a quoted string and returns its canonical form.
func (p *markerParser) value() (string, string) {
	tok := p.next()
	switch {
	case tok == "":
		return "", "a comparison is missing its value"
	case tok[0] == '"' || tok[0] == '\'':
		if len(tok) < 2 || tok[len(tok)-1] != tok[0] {
			return "", "unterminated string"
		}
		body := tok[1 : len(tok)-1]
		for i := 0; i < len(body); i++ {
			if c := body[i]; !isLetter(c) && !isDigit(c) && strings.IndexByte(markerStringChars, c) < 0 {
				return "", fmt.Sprintf("the character %q is not allowed in a marker string", c)
			}
		}
		return `"` + body + `"`, ""
	case markerVars[tok]:
		return tok, ""
	default:
		return "", fmt.Sprintf("%q is not a marker variable (python_version, sys_platform, ...) or a quoted string", tok)
	}
}

func (p *markerParser) peek() string {
	if p.tok == "" {
		p.tok = p.scan()
	}
	return p.tok
}

func (p *markerParser) next() string {
	tok := p.peek()
	p.tok = ""
	return tok
}

// scan returns the next token: "(", ")", an operator, a word, a quoted
// string (unterminated: up to the end), or "" at the end.
func (p *markerParser) scan() string {
	for p.pos < len(p.in) && p.in[p.pos] == ' ' {
		p.pos++
	}
	if p.pos >= len(p.in) {
		return ""
	}
	start := p.pos
	c := p.in[p.pos]
	switch {
	case c == '(' || c == ')':
		p.pos++
	case c == '"' || c == '\'':
		end := strings.IndexByte(p.in[p.pos+1:], c)
		if end < 0 {
			p.pos = len(p.in)
		} else {
			p.pos += end + 2
		}
	case strings.IndexByte("<>=!~", c) >= 0:
		for p.pos < len(p.in) && strings.IndexByte("<>=!~", p.in[p.pos]) >= 0 {
			p.pos++
		}
	default:
		for p.pos < len(p.in) {
			c := p.in[p.pos]
			if !isLetter(c) && !isDigit(c) && c != '_' && c != '.' {
				break
			}
			p.pos++
		}
		if p.pos == start { // a character no token starts with, such as ","
			p.pos++
		}
	}
	return p.in[start:p.pos]
}
