package web

import (
	"errors"

	"github.com/docket-run/docket"
)

// argsSearchWithin is how many of the newest jobs (of those the other
// filters select) a search by payload value scans: docs/web.md says so.
const argsSearchWithin = docket.ArgsWithinDefault

// argsPrefix starts a search by payload value.
const argsPrefix = docket.ArgsSearchPrefix

// parseArgsSearch reads the jobs list's search by payload value,
// "args.<key>[.<key>…]:<value>", as docket.ParseArgsSearch does (the same
// search as GET /v1/jobs?search=). Errors name the field "args".
func parseArgsSearch(s string) (*docket.ArgsMatch, error) {
	m, err := docket.ParseArgsSearch(s)
	if err != nil {
		return nil, errors.New("args: " + err.Error())
	}
	m.Within = argsSearchWithin
	return m, nil
}

// argsRefused is the error of a search by payload value (args not empty)
// by a key whose role may not read payloads, "" when there is none: its
// matches (the list, a bulk action's count) would confirm a guessed
// payload value. It is checked before the search is parsed.
func argsRefused(role docket.Role, args string) string {
	if args == "" || role.ReadsPayloads() {
		return ""
	}
	return "args: searches job payloads, which only admin keys may read; role " + string(role) + " may not"
}
