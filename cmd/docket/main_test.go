package main

import (
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// TestUnknownSubcommand: a mistyped subcommand (docket migrate upp in a
// deploy script) is an error, at every level, not the help and exit 0.
func TestUnknownSubcommand(t *testing.T) {
	t.Parallel()
	var groups []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.HasSubCommands() {
			groups = append(groups, c)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(rootCommand())
	require.Greater(t, len(groups), 5)
	for _, g := range groups {
		path := append(commandPath(g), "nosuchcommand")
		_, err := runDocket(t, path...)
		require.ErrorContains(t, err, `unknown command "nosuchcommand"`, "docket %v", path)
		// The group alone still shows its help.
		out, err := runDocket(t, commandPath(g)...)
		require.NoError(t, err, "docket %v", commandPath(g))
		require.Contains(t, out, "Available Commands")
	}
}

// commandPath is c's words after "docket".
func commandPath(c *cobra.Command) []string {
	var words []string
	for ; c.HasParent(); c = c.Parent() {
		words = append([]string{c.Name()}, words...)
	}
	return words
}
