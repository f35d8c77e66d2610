package postgres

import (
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/docket-run/docket/internal/job"
)

// copyColumns are the docket_jobs columns a COPY batch fills, in the order
// copyReader encodes them; the others take their defaults.
var copyColumns = []string{
	"id", "job_type", "queue", "priority", "payload", "state", "max_attempts",
	"run_at", "sort_at", "timeout_ms", "created_at", "updated_at",
}

// copyJobsSQL is the COPY statement copyReader feeds.
var copyJobsSQL = "COPY docket_jobs (" + strings.Join(copyColumns, ", ") + ") FROM STDIN (FORMAT binary)"

// copyReader streams a plan's jobs in COPY's binary format (the PostgreSQL
// manual, "COPY", "Binary Format"), making and encoding a chunk of rows
// whenever the connection asks for more, so the database works on the
// first rows while the rest are made. It writes each field in its type's
// binary form directly: pgx's generic CopyFrom planned the encoding of
// every value anew and described the table first, a round trip per batch.
//
// As it goes it encodes the batch's state_changed event and collects the
// queues its due jobs wake, for the statement that follows the COPY.
type copyReader struct {
	plan        *insertPlan
	agingMicros int64
	next        int
	buf         []byte
	off         int
	done        bool
	// err is the error that ended the stream: a job that could not be
	// prepared or failed its checks (the COPY is then abandoned).
	err error
	// mu is held by Read; closed says the insert has returned. pgconn
	// reads on a goroutine of its own, which it does not always wait for
	// when the server fails the COPY: close makes sure no job is prepared
	// after the store returns (store.JobInsertManyParams.Prepare).
	mu     sync.Mutex
	closed bool

	event     job.StateChangedEncoder
	dueQueues []string
	seenQueue map[string]bool
}

// copyChunk is how many bytes of rows copyReader encodes at a time;
// copyFirstChunk for the first chunk, which the server waits for (~45
// rows, where a whole chunk is ~340, ~0.4 ms of the client's work).
const (
	copyChunk      = 64 << 10
	copyFirstChunk = 8 << 10
)

// copySignature opens a binary COPY stream: the signature, then a zero
// flags field and a zero header extension length.
const copySignature = "PGCOPY\n\xff\r\n\x00" + "\x00\x00\x00\x00" + "\x00\x00\x00\x00"

// pgEpochMicros is 2000-01-01 UTC, PostgreSQL's timestamp origin, in Unix
// microseconds.
const pgEpochMicros = 946_684_800_000_000

func newCopyReader(plan *insertPlan, agingMicros int64) *copyReader {
	return &copyReader{
		plan: plan, agingMicros: agingMicros, seenQueue: map[string]bool{},
		buf: append(make([]byte, 0, copyChunk+1024), copySignature...),
	}
}

// errCopyClosed ends a Read after the insert returned.
var errCopyClosed = errors.New("insert jobs: the COPY is over")

func (r *copyReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return 0, errCopyClosed
	case r.err != nil:
		return 0, r.err
	}
	if r.off == len(r.buf) {
		if r.done {
			return 0, io.EOF
		}
		if err := r.fill(); err != nil {
			r.err = err
			return 0, err
		}
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}

// close ends the stream (see mu) and returns the error that ended it, if
// any: once it returns, no job is made or prepared any more.
func (r *copyReader) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return r.err
}

// fill encodes the next chunk of rows (and the trailer after the last).
func (r *copyReader) fill() error {
	if r.off > 0 {
		r.buf, r.off = r.buf[:0], 0
	}
	n := len(r.plan.rows)
	chunk := copyChunk
	if r.next == 0 {
		chunk = copyFirstChunk
	}
	for len(r.buf) < chunk && r.next < n {
		j, err := r.plan.row(r.next)
		if err != nil {
			return err
		}
		r.buf = r.appendRow(r.buf, j)
		t := j.TransitionFrom("")
		if r.next == 0 {
			r.event.Grow(n, &t)
		}
		r.event.Add(&t)
		if j.State == job.StateQueued && !j.RunAt.After(r.plan.now) && !r.seenQueue[j.Queue] {
			r.seenQueue[j.Queue] = true
			r.dueQueues = append(r.dueQueues, j.Queue)
		}
		r.next++
	}
	if r.next == n {
		r.buf = binary.BigEndian.AppendUint16(r.buf, 0xffff) // -1 fields: the end
		r.done = true
	}
	return nil
}

// appendRow appends j's copyColumns: each field is its length, then its
// value in the binary form of the column's type.
func (r *copyReader) appendRow(b []byte, j *job.Row) []byte {
	runAt := micros(j.RunAt)
	b = binary.BigEndian.AppendUint16(b, uint16(len(copyColumns)))
	b = appendField(b, j.ID[:])                                            // uuid
	b = appendText(b, j.Type)                                              // text
	b = appendText(b, j.Queue)                                             // text
	b = binary.BigEndian.AppendUint16(appendLen(b, 2), uint16(j.Priority)) // smallint
	b = appendLen(b, 1+len(j.Payload))                                     // jsonb: version 1, then the text
	b = append(append(b, 1), j.Payload...)
	b = appendText(b, string(j.State))                                                   // text
	b = binary.BigEndian.AppendUint32(appendLen(b, 4), uint32(j.MaxAttempts))            // integer
	b = appendTimestamp(b, runAt)                                                        // timestamptz
	b = appendTimestamp(b, runAt+int64(j.Priority)*r.agingMicros)                        // sort_at, as Store.sortAt
	b = binary.BigEndian.AppendUint64(appendLen(b, 8), uint64(j.Timeout.Milliseconds())) // bigint
	b = appendTimestamp(b, micros(j.CreatedAt))
	return appendTimestamp(b, micros(j.UpdatedAt))
}

func appendLen(b []byte, n int) []byte { return binary.BigEndian.AppendUint32(b, uint32(n)) }

func appendField(b, v []byte) []byte { return append(appendLen(b, len(v)), v...) }

func appendText(b []byte, s string) []byte { return append(appendLen(b, len(s)), s...) }

// appendTimestamp appends a timestamptz given in Unix microseconds.
func appendTimestamp(b []byte, unixMicros int64) []byte {
	return binary.BigEndian.AppendUint64(appendLen(b, 8), uint64(unixMicros-pgEpochMicros))
}

// micros is t in Unix microseconds, truncated as PostgreSQL stores it:
// dbTime(t).UnixMicro(), which t.UnixMicro() is without dbTime's work (it
// rounds down too, before 1970 as after; TestCopyEdgeCases).
func micros(t time.Time) int64 { return t.UnixMicro() }
