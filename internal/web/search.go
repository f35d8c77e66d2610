package web

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/docket-run/docket"
)

// argsSearchWithin is how many of the newest jobs (of those the other
// filters select) a search by payload value scans: docs/web.md says so.
const argsSearchWithin = docket.ArgsWithinDefault

// argsPrefix starts a search by payload value.
const argsPrefix = "args."

// parseArgsSearch reads the jobs list's search by payload value,
// "args.<key>[.<key>…]:<value>": the keys up to the first colon, the
// value after it (spaces and colons included). A value starting with a
// double quote must be a JSON string, and and matches strings only (args.id:"42" finds "42" but
// not 42); otherwise it matches the string and, when it is one, the
// number or literal (args.id:42 finds both). Errors name the field
// "args".
func parseArgsSearch(s string) (*docket.ArgsMatch, error) {
	rest, ok := strings.CutPrefix(s, argsPrefix)
	if !ok {
		return nil, errors.New("args: start with args. then the path, a colon and the value (args.user.id:42)")
	}
	path, value, ok := strings.Cut(rest, ":")
	if !ok {
		return nil, errors.New("args: a colon must separate the path from the value (args.user.id:42)")
	}
	m := &docket.ArgsMatch{Path: strings.Split(path, "."), Value: value, Within: argsSearchWithin}
	if strings.HasPrefix(value, `"`) {
		var str string
		if err := json.Unmarshal([]byte(value), &str); err != nil {
			return nil, errors.New(`args: a value starting with " must be a JSON string ("42")`)
		}
		m.Value, m.StringOnly = str, true
	}
	if err := m.Validate(); err != nil {
		var verr *docket.ValidationError
		if errors.As(err, &verr) {
			return nil, errors.New("args: " + strings.TrimPrefix(verr.Field, "args.") + " " + verr.Message)
		}
		return nil, errors.New("args: " + err.Error())
	}
	return m, nil
}
