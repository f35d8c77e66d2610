package task

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// node is one JSON value, objects keeping their keys in document order. It
// is what the strict decoders read: a repeated key, an unknown key and a
// value of the wrong type are each reported with their path, all at once.
type node struct {
	kind  byte // 's' string, 'n' number, 'b' bool, 'z' null, 'o' object, 'a' array
	str   string
	num   json.Number
	bool  bool
	keys  []string // object keys, each once (a repeated key keeps its first value)
	vals  []*node
	items []*node
}

// parseTree parses data, one JSON value (RFC 8259), into a tree. Syntax
// errors, trailing data, invalid UTF-8, nesting deeper than MaxDepth, the
// NUL character and unpaired UTF-16 surrogate escapes ("\ud800": PostgreSQL's
// jsonb refuses both) make it fail with a single problem; repeated keys are
// added to p with their path and parsing goes on.
//
// It is a small parser of our own rather than encoding/json's Decoder.Token,
// which took half the time of validating a judgment; FuzzParseTree checks
// it against encoding/json.
func parseTree(data []byte, p *problems) (*node, bool) {
	if !utf8.Valid(data) {
		p.add("", "the JSON text is not valid UTF-8")
		return nil, false
	}
	var dups problems // reported only when the whole text parses
	ps := &parser{data: data, p: &dups}
	ps.space()
	if ps.pos == len(data) {
		p.add("", "the document is empty")
		return nil, false
	}
	n, err := ps.value()
	if err == nil {
		ps.space()
		if ps.pos < len(data) {
			err = syntaxError("data after the JSON value")
		}
	}
	if err != nil {
		var ve *valueError
		if errors.As(err, &ve) {
			p.add(ve.field, "%s", ve.msg)
		} else {
			p.add("", "%s", err.Error())
		}
		return nil, false
	}
	for _, fe := range dups.list {
		p.add(fe.Field, "%s", fe.Message)
	}
	p.dropped += dups.dropped
	return n, true
}

// MaxDepth is the deepest nesting of arrays and objects a template or a
// judgment may have (a template needs 4 levels, a judgment 3). It bounds
// the work of the decoders.
const MaxDepth = 16

type parser struct {
	data  []byte
	pos   int
	stack pathStack // the path to the value being read
	p     *problems
}

// pathStack is the path to the value being read, spelled only when a
// problem needs it.
type pathStack []pathSegment

type pathSegment struct {
	key   string
	index int // -1 for an object key
}

func (s pathStack) String() string {
	var b strings.Builder
	for i, seg := range s {
		switch {
		case seg.index >= 0:
			b.WriteString("[" + strconv.Itoa(seg.index) + "]")
		case i > 0:
			b.WriteString("." + seg.key)
		default:
			b.WriteString(seg.key)
		}
	}
	return b.String()
}

type syntaxError string

func (e syntaxError) Error() string { return string(e) }

// valueError refuses a string of valid JSON the databases cannot store (a
// NUL character, an unpaired surrogate escape), named by the path of the
// value holding it (of the object, for a key), so that a judgment's
// problem says which field (data.note) and not only that one is wrong.
type valueError struct{ field, msg string }

func (e *valueError) Error() string { return e.msg }

func (ps *parser) valueFail(msg string) error {
	return &valueError{field: ps.stack.String(), msg: msg}
}

// fail is a syntax error at the current position; at the end of the data
// it says the JSON ends too early.
func (ps *parser) fail(msg string) error {
	if ps.pos >= len(ps.data) {
		return syntaxError("the JSON ends too early")
	}
	return syntaxError(fmt.Sprintf("invalid JSON at byte %d: %s", ps.pos, msg))
}

func (ps *parser) space() {
	for ps.pos < len(ps.data) {
		switch ps.data[ps.pos] {
		case ' ', '\t', '\n', '\r':
			ps.pos++
		default:
			return
		}
	}
}

func (ps *parser) value() (*node, error) {
	if ps.pos >= len(ps.data) {
		return nil, ps.fail("")
	}
	switch c := ps.data[ps.pos]; {
	case c == '{':
		return ps.object()
	case c == '[':
		return ps.array()
	case c == '"':
		s, err := ps.string()
		if err != nil {
			return nil, err
		}
		return &node{kind: 's', str: s}, nil
	case c == '-' || c >= '0' && c <= '9':
		return ps.number()
	case c == 't':
		return ps.literal("true", &node{kind: 'b', bool: true})
	case c == 'f':
		return ps.literal("false", &node{kind: 'b'})
	case c == 'n':
		return ps.literal("null", &node{kind: 'z'})
	default:
		return nil, ps.fail(fmt.Sprintf("unexpected character %q looking for a value", c))
	}
}

func (ps *parser) literal(word string, n *node) (*node, error) {
	for i := 0; i < len(word); i++ {
		if ps.pos >= len(ps.data) {
			return nil, ps.fail("")
		}
		if ps.data[ps.pos] != word[i] {
			return nil, ps.fail(fmt.Sprintf("unexpected character %q in literal %s", ps.data[ps.pos], word))
		}
		ps.pos++
	}
	return n, nil
}

func (ps *parser) enter() error {
	if len(ps.stack) >= MaxDepth {
		return syntaxError(fmt.Sprintf("the JSON is nested more than %d levels deep", MaxDepth))
	}
	ps.pos++ // the opening delimiter
	ps.space()
	return nil
}

func (ps *parser) object() (*node, error) {
	if err := ps.enter(); err != nil {
		return nil, err
	}
	n := &node{kind: 'o'}
	if ps.pos < len(ps.data) && ps.data[ps.pos] == '}' {
		ps.pos++
		return n, nil
	}
	var seen map[string]bool
	for {
		if ps.pos >= len(ps.data) || ps.data[ps.pos] != '"' {
			return nil, ps.fail("expected a string key")
		}
		key, err := ps.string()
		if err != nil {
			return nil, err
		}
		ps.space()
		if ps.pos >= len(ps.data) || ps.data[ps.pos] != ':' {
			return nil, ps.fail("expected ':' after an object key")
		}
		ps.pos++
		ps.space()
		ps.stack = append(ps.stack, pathSegment{key: key, index: -1})
		child, err := ps.value()
		if err != nil {
			return nil, err
		}
		if seen == nil {
			seen = make(map[string]bool, 8)
		}
		if seen[key] {
			ps.p.add(ps.stack.String(), "appears more than once")
		} else {
			seen[key] = true
			n.keys = append(n.keys, key)
			n.vals = append(n.vals, child)
		}
		ps.stack = ps.stack[:len(ps.stack)-1]
		ps.space()
		if ps.pos >= len(ps.data) {
			return nil, ps.fail("")
		}
		switch ps.data[ps.pos] {
		case ',':
			ps.pos++
			ps.space()
		case '}':
			ps.pos++
			return n, nil
		default:
			return nil, ps.fail("expected ',' or '}' after an object value")
		}
	}
}

func (ps *parser) array() (*node, error) {
	if err := ps.enter(); err != nil {
		return nil, err
	}
	n := &node{kind: 'a'}
	if ps.pos < len(ps.data) && ps.data[ps.pos] == ']' {
		ps.pos++
		return n, nil
	}
	for {
		ps.stack = append(ps.stack, pathSegment{index: len(n.items)})
		child, err := ps.value()
		if err != nil {
			return nil, err
		}
		ps.stack = ps.stack[:len(ps.stack)-1]
		n.items = append(n.items, child)
		ps.space()
		if ps.pos >= len(ps.data) {
			return nil, ps.fail("")
		}
		switch ps.data[ps.pos] {
		case ',':
			ps.pos++
			ps.space()
		case ']':
			ps.pos++
			return n, nil
		default:
			return nil, ps.fail("expected ',' or ']' after an array element")
		}
	}
}

// number reads a number of the JSON grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (ps *parser) number() (*node, error) {
	start := ps.pos
	digits := func() bool {
		at := ps.pos
		for ps.pos < len(ps.data) && ps.data[ps.pos] >= '0' && ps.data[ps.pos] <= '9' {
			ps.pos++
		}
		return ps.pos > at
	}
	if ps.data[ps.pos] == '-' {
		ps.pos++
	}
	switch {
	case ps.pos < len(ps.data) && ps.data[ps.pos] == '0':
		ps.pos++
	case !digits():
		return nil, ps.fail("expected a digit in a number")
	}
	if ps.pos < len(ps.data) && ps.data[ps.pos] == '.' {
		ps.pos++
		if !digits() {
			return nil, ps.fail("expected a digit after the decimal point")
		}
	}
	if ps.pos < len(ps.data) && (ps.data[ps.pos] == 'e' || ps.data[ps.pos] == 'E') {
		ps.pos++
		if ps.pos < len(ps.data) && (ps.data[ps.pos] == '+' || ps.data[ps.pos] == '-') {
			ps.pos++
		}
		if !digits() {
			return nil, ps.fail("expected a digit in the exponent")
		}
	}
	return &node{kind: 'n', num: json.Number(ps.data[start:ps.pos])}, nil
}

// string reads a string; the data is valid UTF-8 (parseTree checked).
func (ps *parser) string() (string, error) {
	ps.pos++ // the opening quote
	start := ps.pos
	// Fast path: no escapes.
	for ps.pos < len(ps.data) {
		c := ps.data[ps.pos]
		if c == '"' {
			s := string(ps.data[start:ps.pos])
			ps.pos++
			return s, nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		ps.pos++
	}
	buf := append([]byte(nil), ps.data[start:ps.pos]...)
	for ps.pos < len(ps.data) {
		c := ps.data[ps.pos]
		switch {
		case c == '"':
			ps.pos++
			return string(buf), nil
		case c < 0x20:
			return "", ps.fail(fmt.Sprintf("control character %q in a string (escape it)", c))
		case c != '\\':
			buf = append(buf, c)
			ps.pos++
			continue
		}
		ps.pos++ // the backslash
		if ps.pos >= len(ps.data) {
			return "", ps.fail("")
		}
		e := ps.data[ps.pos]
		ps.pos++
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, err := ps.hex4()
			if err != nil {
				return "", err
			}
			if utf16.IsSurrogate(r) {
				var r2 rune = -1
				if r < 0xdc00 && ps.pos+1 < len(ps.data) && ps.data[ps.pos] == '\\' && ps.data[ps.pos+1] == 'u' {
					ps.pos += 2
					if r2, err = ps.hex4(); err != nil {
						return "", err
					}
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return "", ps.valueFail("a string must not contain an unpaired UTF-16 surrogate escape (\\ud800 to \\udfff alone)")
				}
			}
			if r == 0 {
				return "", ps.valueFail(`a string must not contain the NUL character (\u0000)`)
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", ps.fail(fmt.Sprintf("invalid escape '\\%c' in a string", e))
		}
	}
	return "", ps.fail("")
}

func (ps *parser) hex4() (rune, error) {
	if ps.pos+4 > len(ps.data) {
		ps.pos = len(ps.data)
		return 0, ps.fail("")
	}
	var r rune
	for _, c := range ps.data[ps.pos : ps.pos+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, ps.fail("invalid \\u escape in a string")
		}
	}
	ps.pos += 4
	return r, nil
}

// join appends an object key to a path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// describe names a JSON value's type for messages ("a string", "null").
func (n *node) describe() string {
	switch n.kind {
	case 's':
		return "a string"
	case 'n':
		return "the number " + string(n.num)
	case 'b':
		return fmt.Sprintf("the boolean %t", n.bool)
	case 'z':
		return "null"
	case 'o':
		return "an object"
	}
	return "an array"
}

// value returns the node as the Go value jsonschema validates: string,
// json.Number, bool, nil, []any, map[string]any.
func (n *node) value() any {
	switch n.kind {
	case 's':
		return n.str
	case 'n':
		return n.num
	case 'b':
		return n.bool
	case 'o':
		m := make(map[string]any, len(n.keys))
		for i, k := range n.keys {
			m[k] = n.vals[i].value()
		}
		return m
	case 'a':
		a := make([]any, len(n.items))
		for i, c := range n.items {
			a[i] = c.value()
		}
		return a
	}
	return nil
}

// canonicalJSON encodes n back to JSON, object keys sorted, no white
// space: a value kept as it came (a template's quality settings) hashes
// the same whatever the key order and spacing it was sent with.
func (n *node) canonicalJSON() json.RawMessage {
	var b []byte
	var enc func(n *node)
	enc = func(n *node) {
		switch n.kind {
		case 's':
			s, _ := json.Marshal(n.str)
			b = append(b, s...)
		case 'n':
			b = append(b, n.num...)
		case 'b':
			b = strconv.AppendBool(b, n.bool)
		case 'z':
			b = append(b, "null"...)
		case 'a':
			b = append(b, '[')
			for i, it := range n.items {
				if i > 0 {
					b = append(b, ',')
				}
				enc(it)
			}
			b = append(b, ']')
		case 'o':
			idx := make([]int, len(n.keys))
			for i := range idx {
				idx[i] = i
			}
			sort.Slice(idx, func(i, j int) bool { return n.keys[idx[i]] < n.keys[idx[j]] })
			b = append(b, '{')
			for i, k := range idx {
				if i > 0 {
					b = append(b, ',')
				}
				key, _ := json.Marshal(n.keys[k])
				b = append(b, key...)
				b = append(b, ':')
				enc(n.vals[k])
			}
			b = append(b, '}')
		}
	}
	enc(n)
	return b
}
