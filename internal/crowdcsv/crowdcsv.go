// Package crowdcsv reads the CSV files of crowd judgments, gold answers and
// truth that docket aggregate takes: a header row naming the columns, then
// one record per row. It streams: one row at a time, in constant memory;
// the fields it returns hold only their own bytes.
package crowdcsv

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Reader reads the named columns of a CSV stream, row by row.
type Reader struct {
	csv    *csv.Reader
	names  []string // the wanted columns
	cols   []int    // position of each wanted column in a record
	fields int      // in the header row, and so in every record
	row    []string
	line   int
}

// NewReader reads the header row from r and finds the wanted columns in it
// (by name, case-insensitive, in any order; other columns are ignored).
// Errors name the missing columns.
func NewReader(r io.Reader, columns ...string) (*Reader, error) {
	c := csv.NewReader(r)
	c.ReuseRecord = true
	c.FieldsPerRecord = -1 // Next checks, with a message that says what is wrong
	header, err := c.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("line 1: empty file; want a header row with the columns %s", strings.Join(columns, ","))
	}
	if err != nil {
		return nil, lineError(err)
	}
	rd := &Reader{csv: c, names: columns, cols: make([]int, len(columns)), fields: len(header), row: make([]string, len(columns))}
	var missing []string
	for n, want := range columns {
		rd.cols[n] = -1
		for p, h := range header {
			if p == 0 {
				h = strings.TrimPrefix(h, "\uFEFF")
			}
			if strings.EqualFold(strings.TrimSpace(h), want) {
				rd.cols[n] = p
				break
			}
		}
		if rd.cols[n] < 0 {
			missing = append(missing, want)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("line 1: the header row %q lacks the column(s) %s", strings.Join(header, ","), strings.Join(missing, ","))
	}
	return rd, nil
}

// Next returns the wanted fields of the next row, in the order of the
// columns given to NewReader; the slice is reused by the next call. Every
// field must be non-empty (after trimming spaces). At the end it returns
// io.EOF; a malformed row gives an error naming its line.
func (r *Reader) Next() ([]string, error) {
	rec, err := r.csv.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, lineError(err)
	}
	r.line, _ = r.csv.FieldPos(0)
	if len(rec) != r.fields {
		return nil, fmt.Errorf("line %d: %d fields, but the header row has %d", r.line, len(rec), r.fields)
	}
	size := 0
	for n, p := range r.cols {
		f := strings.TrimSpace(rec[p])
		if f == "" {
			return nil, fmt.Errorf("line %d: %s (column %d) is empty", r.line, r.names[n], p+1)
		}
		r.row[n] = f
		size += len(f)
	}
	// The fields share one string with the whole record, other columns
	// included: kept by the caller, they would keep it all (a file with a
	// long comment column was held in memory whole). One copy of the
	// wanted fields, as many allocations as before.
	var b strings.Builder
	b.Grow(size)
	for _, f := range r.row {
		b.WriteString(f)
	}
	all, at := b.String(), 0
	for n, f := range r.row {
		r.row[n] = all[at : at+len(f)]
		at += len(f)
	}
	return r.row, nil
}

// Line is the line number of the row Next returned last.
func (r *Reader) Line() int { return r.line }

// lineError rewords a csv.ParseError as "line N: …".
func lineError(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("line %d: %w", pe.Line, pe.Err)
	}
	return err
}
