package task

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
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

// parseTree parses data, one JSON value, into a tree. Syntax errors,
// trailing data, invalid UTF-8 and the NUL character (PostgreSQL's jsonb
// cannot hold it) make it fail with a single problem; repeated keys are
// added to p with their path and parsing goes on.
func parseTree(data []byte, p *problems) (*node, bool) {
	if !utf8.Valid(data) {
		p.add("", "the JSON text is not valid UTF-8")
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack pathStack
	n, err := readNode(dec, &stack, p)
	if errors.Is(err, io.EOF) && len(bytes.TrimSpace(data)) > 0 {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		p.add("", "%s", syntaxMessage(err))
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		p.add("", "data after the JSON value")
		return nil, false
	}
	return n, true
}

func syntaxMessage(err error) string {
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at byte %d: %v", syn.Offset, syn)
	case errors.Is(err, io.EOF):
		return "the document is empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends too early"
	case errors.Is(err, errNUL):
		return `a string must not contain the NUL character (\u0000)`
	case errors.Is(err, errDepth):
		return err.Error()
	}
	return "invalid JSON: " + err.Error()
}

var (
	errNUL   = errors.New("NUL character")
	errDepth = fmt.Errorf("the JSON is nested more than %d levels deep", MaxDepth)
)

// MaxDepth is the deepest nesting of arrays and objects a template or a
// judgment may have (a template needs 4 levels, a judgment 3). It bounds
// the work of the decoders.
const MaxDepth = 16

// pathStack is the path to the value being read, spelled only when a
// problem needs it.
type pathStack []struct {
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

func readNode(dec *json.Decoder, stack *pathStack, p *problems) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') && len(*stack) >= MaxDepth {
		return nil, errDepth
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &node{kind: 'o'}
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := kt.(string)
				if strings.ContainsRune(key, 0) {
					return nil, errNUL
				}
				*stack = append(*stack, struct {
					key   string
					index int
				}{key, -1})
				child, err := readNode(dec, stack, p)
				if err != nil {
					return nil, err
				}
				if seen[key] {
					p.add(stack.String(), "appears more than once")
				}
				*stack = (*stack)[:len(*stack)-1]
				if seen[key] {
					continue
				}
				seen[key] = true
				n.keys = append(n.keys, key)
				n.vals = append(n.vals, child)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return n, nil
		case '[':
			n := &node{kind: 'a'}
			for dec.More() {
				*stack = append(*stack, struct {
					key   string
					index int
				}{"", len(n.items)})
				child, err := readNode(dec, stack, p)
				if err != nil {
					return nil, err
				}
				*stack = (*stack)[:len(*stack)-1]
				n.items = append(n.items, child)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return n, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case string:
		if strings.ContainsRune(t, 0) {
			return nil, errNUL
		}
		return &node{kind: 's', str: t}, nil
	case json.Number:
		return &node{kind: 'n', num: t}, nil
	case bool:
		return &node{kind: 'b', bool: t}, nil
	case nil:
		return &node{kind: 'z'}, nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
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
