package aggregate

// scanObject is the fast path of decodeObject: ONE pass over value that
// checks the JSON grammar (RFC 8259, as encoding/json's Valid applies it) and
// records the raw values of the top-level members named in m.names. It
// returns true only when value is whitespace, one valid JSON object,
// whitespace; then m holds exactly what the slow path (utf8.Valid +
// json.Valid + member scanner) would return. It returns false for anything
// else, and also when it is not sure (nesting deeper than maxScanDepth): the
// caller then takes the slow path, which decides and words the error. So a
// false is never wrong, only slower; value must already be valid UTF-8.
func scanObject(b []byte, m *members) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		keyEnd, escaped := scanStringEsc(b, i)
		if keyEnd < 0 {
			return false
		}
		key := b[i:keyEnd]
		i = skipSpace(b, keyEnd)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		var end int
		plain := false
		if i < len(b) && b[i] == '"' {
			var esc bool
			end, esc = scanStringEsc(b, i)
			plain = !esc
		} else {
			end = scanValue(b, i, 1)
		}
		if end < 0 {
			return false
		}
		var idx int
		if escaped {
			idx = m.index(key)
		} else {
			idx = m.lookup(key[1 : len(key)-1])
		}
		if idx >= 0 {
			m.raw[idx], m.plain[idx] = b[i:end], plain
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// lookup returns the position in m.names of the member named name (a key
// without escapes), or -1. It tries the name after the last one found first.
func (m *members) lookup(name []byte) int {
	if i := m.guess; i < len(m.names) && string(name) == m.names[i] {
		m.guess = i + 1
		return i
	}
	for i, n := range m.names {
		if string(name) == n {
			m.guess = i + 1
			return i
		}
	}
	return -1
}

// maxScanDepth bounds the nesting scanValue follows; deeper input goes to the
// slow path (encoding/json has its own limit, 10000).
const maxScanDepth = 64

// scanValue returns the index just past the JSON value starting at b[i], or
// -1 when there is none (or nesting exceeds maxScanDepth).
func scanValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return scanString(b, i)
	case c == '-' || c >= '0' && c <= '9':
		return scanNumber(b, i)
	case c == '{' || c == '[':
		if depth >= maxScanDepth {
			return -1
		}
		return scanComposite(b, i, depth+1)
	case c == 't':
		return scanLiteral(b, i, "true")
	case c == 'f':
		return scanLiteral(b, i, "false")
	case c == 'n':
		return scanLiteral(b, i, "null")
	}
	return -1
}

// scanComposite scans the object or array starting at b[i].
func scanComposite(b []byte, i, depth int) int {
	object := b[i] == '{'
	closer := byte(']')
	if object {
		closer = '}'
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == closer {
		return i + 1
	}
	for {
		if object {
			if i >= len(b) || b[i] != '"' {
				return -1
			}
			if i = scanString(b, i); i < 0 {
				return -1
			}
			i = skipSpace(b, i)
			if i >= len(b) || b[i] != ':' {
				return -1
			}
			i = skipSpace(b, i+1)
		}
		if i = scanValue(b, i, depth); i < 0 {
			return -1
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case closer:
			return i + 1
		default:
			return -1
		}
	}
}

// scanString returns the index just past the JSON string starting at b[i]
// (a '"'), or -1: control characters must be escaped, escapes are \" \\ \/
// \b \f \n \r \t and \u with four hex digits.
func scanString(b []byte, i int) int {
	end, _ := scanStringEsc(b, i)
	return end
}

// scanStringEsc is scanString that also tells whether the string holds an
// escape.
func scanStringEsc(b []byte, i int) (end int, escaped bool) {
	for k := i + 1; k < len(b); k++ {
		for k < len(b) && plain[b[k]] {
			k++
		}
		if k >= len(b) {
			break
		}
		switch c := b[k]; {
		case c == '"':
			return k + 1, escaped
		case c == '\\':
			escaped = true
			k++
			if k >= len(b) {
				return -1, false
			}
			switch b[k] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if k+4 >= len(b) {
					return -1, false
				}
				for _, h := range b[k+1 : k+5] {
					if !isHex(h) {
						return -1, false
					}
				}
				k += 4
			default:
				return -1, false
			}
		case c < 0x20:
			return -1, false
		}
	}
	return -1, false
}

// plain tells the bytes that stand for themselves inside a JSON string: all
// but '"', '\\' and the control characters.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// scanNumber returns the index just past the JSON number starting at b[i],
// or -1: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?. What follows is the
// caller's to check.
func scanNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i++
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i
}

// scanLiteral returns the index just past lit at b[i], or -1.
func scanLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// smallInt parses raw, a JSON number, when it is an integer of at most 15
// digits (exactly representable, so the float64 is the one strconv would
// give); ok is false otherwise and the caller parses it in full.
func smallInt(raw []byte) (n int64, ok bool) {
	neg := len(raw) > 0 && raw[0] == '-'
	digits := raw
	if neg {
		digits = raw[1:]
	}
	if len(digits) == 0 || len(digits) > 15 {
		return 0, false
	}
	for _, c := range digits {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		if n == 0 {
			return 0, false // -0: a negative zero as a float64, which strconv keeps
		}
		n = -n
	}
	return n, true
}
