package docket_test

import (
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
)

func TestInsertConflict(t *testing.T) {
	t.Parallel()
	runAt := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
	existing := &docket.JobRow{
		Type: "email", Queue: "email", Priority: docket.PriorityDefault, MaxAttempts: 25,
		Payload: json.RawMessage(`{"a": [1, 2.50, {"b": null}], "big": 12345678901234567890123, "s": "x"}`),
		RunAt:   runAt,
	}
	prio := func(p int) *int { return &p }
	for _, tc := range []struct {
		name    string
		typ     string
		payload string
		opts    *docket.InsertOpts
		want    string
	}{
		{"same", "email", `{"s":"x","big":12345678901234567890123,"a":[1,2.5,{"b":null}]}`, nil, ""},
		{"number spelling", "email", `{"s":"\u0078","big":1.2345678901234567890123e22,"a":[1e0,25e-1,{"b":null}]}`, nil, ""},
		{"defaults spelled out", "email", `{"s":"x","big":12345678901234567890123,"a":[1,2.5,{"b":null}]}`,
			&docket.InsertOpts{Queue: "email", Priority: prio(docket.PriorityDefault), MaxAttempts: 25, RunAt: runAt.Add(400 * time.Nanosecond)}, ""},
		{"type", "sms", `{}`, nil, "jobType"},
		{"big number", "email", `{"s":"x","big":12345678901234567890124,"a":[1,2.5,{"b":null}]}`, nil, "payload"},
		{"array order", "email", `{"s":"x","big":12345678901234567890123,"a":[2.5,1,{"b":null}]}`, nil, "payload"},
		{"missing key", "email", `{"s":"x","big":12345678901234567890123,"a":[1,2.5,{}]}`, nil, "payload"},
		{"huge exponent", "email", `{"s":"x","big":1e399,"a":[1,2.5,{"b":null}]}`, nil, "payload"},
		{"queue", "email", `{"s":"x","big":12345678901234567890123,"a":[1,2.5,{"b":null}]}`, &docket.InsertOpts{Queue: "other"}, "queue"},
		{"priority", "email", `{"s":"x","big":12345678901234567890123,"a":[1,2.5,{"b":null}]}`, &docket.InsertOpts{Priority: prio(0)}, "priority"},
		{"max attempts", "email", `{"s":"x","big":12345678901234567890123,"a":[1,2.5,{"b":null}]}`, &docket.InsertOpts{MaxAttempts: 3}, "maxAttempts"},
		{"timeout", "email", `{"s":"x","big":12345678901234567890123,"a":[1,2.5,{"b":null}]}`, &docket.InsertOpts{Timeout: time.Second}, "timeout"},
		{"run at", "email", `{"s":"x","big":12345678901234567890123,"a":[1,2.5,{"b":null}]}`, &docket.InsertOpts{RunAt: runAt.Add(time.Second)}, "runAt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := docket.InsertConflict(existing, docket.RawArgs{Type: tc.typ, Payload: json.RawMessage(tc.payload)}, tc.opts)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// FuzzInsertConflictNumbers checks the exact number comparison of payloads
// against big.Rat on numbers small enough for big.Rat to handle.
func FuzzInsertConflictNumbers(f *testing.F) {
	for _, seed := range [][2]string{{"1", "1.0"}, {"-0", "0e5"}, {"12e-1", "1.2"}, {"100", "1e2"}, {"0.10", "1E-1"}, {"5", "6"}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ra, okA := smallNumber(a)
		rb, okB := smallNumber(b)
		if !okA || !okB {
			return
		}
		existing := &docket.JobRow{Type: "n", Queue: "n", Priority: docket.PriorityDefault, MaxAttempts: 25, Payload: json.RawMessage(a)}
		got, err := docket.InsertConflict(existing, docket.RawArgs{Type: "n", Payload: json.RawMessage(b)}, nil)
		require.NoError(t, err)
		require.Equal(t, ra.Cmp(rb) == 0, got == "", "%s vs %s: %q", a, b, got)
	})
}

// smallNumber parses a JSON number whose exponent is small.
func smallNumber(s string) (*big.Rat, bool) {
	var n json.Number
	if json.Unmarshal([]byte(s), &n) != nil || len(s) > 40 {
		return nil, false
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil || e > 100 || e < -100 {
			return nil, false
		}
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}
