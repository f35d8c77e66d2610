package docket_test

import (
	"encoding/json"
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
		{"huge exponent", "email", `{"s":"x","big":1e999999999999,"a":[1,2.5,{"b":null}]}`, nil, "payload"},
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
