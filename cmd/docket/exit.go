package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// docket's exit statuses: 0 when the command did what it was asked, 2 when
// the command line is wrong (nothing was done), 1 for every other failure.
const (
	exitFailure = 1
	exitUsage   = 2
)

// usageError is a command line docket refuses before doing anything: a
// flag value out of range, flags that exclude each other. Errors cobra
// finds before a command runs (an unknown command or flag, a flag value of
// the wrong type, a wrong number of arguments) are usage errors too,
// without this type (see execute).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usageErrorf is a usageError with a message as fmt.Errorf makes it.
func usageErrorf(format string, a ...any) error {
	return &usageError{fmt.Errorf(format, a...)}
}

// asUsage marks err, if not nil, as a usage error.
func asUsage(err error) error {
	if err == nil {
		return nil
	}
	return &usageError{err}
}

// execute runs the command line args on root, prints an error to stderr
// and returns the exit status. An error returned before a command's RunE
// was called comes from cobra's parsing of the command line (unknown
// command or flag, bad flag value, wrong number of arguments), so it is a
// usage error; within RunE, only a *usageError is.
func execute(ctx context.Context, root *cobra.Command, args []string, stderr io.Writer) int {
	ran := false
	markRun(root, &ran)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "docket:", err)
	var ue *usageError
	if !ran || errors.As(err, &ue) {
		return exitUsage
	}
	return exitFailure
}

// markRun makes every command of the tree under c set *ran when its RunE
// is called.
func markRun(c *cobra.Command, ran *bool) {
	for _, sub := range c.Commands() {
		markRun(sub, ran)
	}
	if c.RunE == nil {
		return
	}
	runE := c.RunE
	c.RunE = func(cmd *cobra.Command, args []string) error {
		*ran = true
		return runE(cmd, args)
	}
}
