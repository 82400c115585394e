package wire

import "strings"

// maxTraceState is the longest tracestate carried: the W3C Trace Context
// recommendation's 512 characters.
const maxTraceState = 512

// ValidTraceParent says whether s is a W3C traceparent header value that
// a job may carry: version 00, a 32-digit trace id and a 16-digit parent
// id in lower-case hexadecimal, neither all zeros, and two digits of
// flags. Anything else (it comes from the client) is dropped.
func ValidTraceParent(s string) bool {
	parts := strings.Split(s, "-")
	if len(parts) != 4 || parts[0] != "00" {
		return false
	}
	for i, n := range []int{2, 32, 16, 2} {
		if len(parts[i]) != n || !lowerHex(parts[i]) {
			return false
		}
	}
	return strings.Trim(parts[1], "0") != "" && strings.Trim(parts[2], "0") != ""
}

// TraceID is the trace id of a valid traceparent, else "".
func TraceID(traceparent string) string {
	if !ValidTraceParent(traceparent) {
		return ""
	}
	return traceparent[3:35]
}

// ValidTraceState says whether s may be carried as a tracestate: at most
// 512 characters, printable ASCII (its list members are not parsed: it is
// only logged and passed on).
func ValidTraceState(s string) bool {
	if len(s) > maxTraceState {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
