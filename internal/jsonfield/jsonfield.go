// Package jsonfield reads the name of an unknown field out of an
// encoding/json error. A Decoder with DisallowUnknownFields reports such a
// field with a plain error whose text is the only place the name appears
// (`json: unknown field "name"`), so docket depends on that text, here and
// nowhere else; the package's test fails if Go ever words it otherwise.
package jsonfield

import (
	"strconv"
	"strings"
)

// unknownPrefix starts the text of encoding/json's error for a field a
// Decoder with DisallowUnknownFields does not know.
const unknownPrefix = "json: unknown field "

// Unknown reports whether err is encoding/json's error for an unknown
// field and, if so, the field's name (unquoted; "" for the empty key).
func Unknown(err error) (name string, ok bool) {
	if err == nil {
		return "", false
	}
	quoted, ok := strings.CutPrefix(err.Error(), unknownPrefix)
	if !ok {
		return "", false
	}
	if name, err := strconv.Unquote(quoted); err == nil {
		return name, true
	}
	return strings.Trim(quoted, `"`), true
}
