package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"testing"
)

// FuzzDecode feeds arbitrary bodies to the strict decoder and the
// validators of the request types: whatever the input, the answer is either
// success or a 4xx problem — never a panic, never a 5xx — and a 400 that
// names fields names each once, with a message. A body whose top-level
// object repeats a key is never accepted (keys repeated inside values are
// the user's JSON), nor one with a key that is not a field as spelled
// (encoding/json alone takes "PROGRESS" for "progress").
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"queues":["q"],"max":1,"waitSeconds":0,"leaseSeconds":30,"workerId":"w"}`,
		`{"progress":50,"message":"half"}`, `{"result":{"a":1}}`, `{"error":"x","retryable":true}`,
		``, `{`, `[]`, `null`, `{"max":"1"}`, `{"queues":[1]}`, `{"extra":true}`, `{} {}`, `{}}`, `{} ]`,
		`{"progress":1e400}`, "\x00", `{"queues":["a"],"max":-1}`,
		`{"jobType":"t","priority":1.5}`, `{"jobType":"","priority":99,"maxAttempts":0}`,
		`{"jobType":"a","jobType":"b"}`, `{"payload":{"x":[{"y":1,"y":2}]},"jobType":"t"}`,
		`{"jobs":[{"jobType":"a"},{"jobType":1,"jobType":2}]}`, `{"queues":"q","workerId":7}`,
		`{"PROGRESS":5}`, `{"Reason":"x"}`, `{"Error":"x","retryable":true}`, `{"reason":"a","Reason":"b"}`,
		`{"url":"http://127.0.0.1:9/hook","eventTypes":["job.state_changed"],"secret":"0123456789abcdef"}`,
		`{"url":"https://u:p@127.0.0.1:99999/x","eventTypes":["*","nope"],"secret":"short"}`,
		`{"url":"http://%zz","eventTypes":"*","secret":"\u0000123456789abcdef"}`, `{"url":1,"URL":"x"}`,
	} {
		f.Add([]byte(seed))
	}
	targets := []func() any{
		func() any { return new(leaseRequest) },
		func() any { return new(heartbeatRequest) },
		func() any { return new(completeRequest) },
		func() any { return new(failRequest) },
		func() any { return new(releaseRequest) },
		func() any { return new(submitRequest) },
		func() any { return new(batchRequest) },
		func() any { return new(webhookRequest) },
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, target := range targets {
			into := target()
			_, optional := into.(optionalBody)
			r := httptest.NewRequest("POST", "/", bytes.NewReader(body))
			err := decodeBody(httptest.NewRecorder(), r, 1<<16, optional, into)
			if err == nil {
				dups, keys := scanKeys(body)
				if len(dups) > 0 {
					t.Fatalf("%T: accepted %q although it repeats %s", into, body, dups[0].Field)
				}
				for _, k := range keys {
					if !fieldNames(reflect.TypeOf(into))[k] {
						t.Fatalf("%T: accepted %q although it has no field %q", into, body, k)
					}
				}
				continue
			}
			var p *Problem
			if !errors.As(err, &p) {
				t.Fatalf("%T: error is not a problem: %v", into, err)
			}
			if p.Status < 400 || p.Status >= 500 {
				t.Fatalf("%T: status %d for bad input %q", into, p.Status, body)
			}
			if p.Status == http.StatusBadRequest && p.Detail == "" {
				t.Fatalf("%T: a 400 without detail", into)
			}
			named := map[string]bool{}
			for _, e := range p.Errors {
				if e.Field == "" || e.Message == "" || named[e.Field] {
					t.Fatalf("%T: field errors %+v for %q", into, p.Errors, body)
				}
				named[e.Field] = true
			}
		}
	})
}

// FuzzScanKeys checks the byte scanner of top-level keys against
// encoding/json's tokenizer on every valid JSON input.
func FuzzScanKeys(f *testing.F) {
	for _, seed := range []string{`{}`, `{"a":1,"a":2}`, `{"a":{"b":1,"b":2},"c":[1,"]",{"}":"{"}]}`,
		`{"\u0061":1,"a":2}`, `{"":0,"":1}`, `[{"a":1}]`, `"x"`, `{"s":"\\\"","n":1e5 ,"t" :true}`, "{\"\xff\":1,\"\xfe\":2}"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		var wantTop, wantDups []string
		dec := json.NewDecoder(bytes.NewReader(data))
		if tok, _ := dec.Token(); tok == json.Delim('{') {
			for dec.More() {
				tok, err := dec.Token()
				if err != nil {
					t.Fatal(err)
				}
				k := tok.(string)
				if slices.Contains(wantTop, k) {
					if k == "" {
						k = `""`
					}
					if !slices.Contains(wantDups, k) {
						wantDups = append(wantDups, k)
					}
				} else {
					wantTop = append(wantTop, k)
				}
				var skip json.RawMessage
				if err := dec.Decode(&skip); err != nil {
					t.Fatal(err)
				}
			}
		}
		dups, top := scanKeys(data)
		var gotDups []string
		for _, d := range dups {
			gotDups = append(gotDups, d.Field)
		}
		if !slices.Equal(wantTop, top) || !slices.Equal(wantDups, gotDups) {
			t.Fatalf("%q: keys %q dups %q, want %q %q", data, top, gotDups, wantTop, wantDups)
		}
	})
}
