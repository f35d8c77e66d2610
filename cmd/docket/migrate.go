package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/docket-run/docket"
)

func migrateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply, revert or show database schema migrations",
	}
	var (
		url     *string
		downAll bool
	)
	run := func(dir string) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			steps := 0
			if len(args) == 1 {
				n, err := strconv.Atoi(args[0])
				if err != nil || n < 1 {
					return usageErrorf("steps %q: must be a positive integer", args[0])
				}
				steps = n
			}
			// Reverting every migration drops every docket table and what
			// it holds (jobs, runs, API keys): it is asked for by name,
			// never by leaving the count out.
			if dir == "down" {
				switch {
				case downAll && steps > 0:
					return usageErrorf("give either a number of migrations to revert or --all, not both")
				case !downAll && steps == 0:
					return usageErrorf("say how many migrations to revert (docket migrate down 1 reverts the last one), or --all to revert every one, which drops docket's tables and everything in them")
				}
			}
			// Only up may create the database.
			open := openExisting
			if dir == "up" {
				// Up is what the client's warning of pending migrations
				// asks for: not said again here.
				open = func(ctx context.Context, u string, _ slog.Level) (*docket.Client, error) {
					return openClient(ctx, u, false, slog.LevelError)
				}
			}
			client, err := open(cmd.Context(), *url, slog.LevelInfo)
			if err != nil {
				return err
			}
			defer client.Close()
			// Each migration commits on its own: those done before one
			// that failed stay done, and are listed before its error.
			done, err := client.Migrate(cmd.Context(), migrateDirection(dir), steps)
			for _, m := range done {
				fmt.Fprintf(cmd.OutOrStdout(), "migrated %s %04d_%s\n", dir, m.Version, m.Name)
			}
			if err != nil {
				return err
			}
			if len(done) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "nothing to migrate %s\n", dir)
			}
			return nil
		}
	}
	up := &cobra.Command{Use: "up [steps]", Short: "Apply pending migrations (all, or the next N)", Args: cobra.MaximumNArgs(1), RunE: run("up")}
	down := &cobra.Command{Use: "down (N | --all)", Short: "Revert the last N applied migrations, or with --all every one (dropping docket's tables and their data)", Args: cobra.MaximumNArgs(1), RunE: run("down")}
	down.Flags().BoolVar(&downAll, "all", false, "revert every applied migration: drops docket's tables and everything in them")
	status := &cobra.Command{
		Use:   "status",
		Short: "List migrations and whether each is applied",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := openExisting(cmd.Context(), *url, slog.LevelInfo)
			if err != nil {
				return err
			}
			defer client.Close()
			ms, err := client.MigrationStatus(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED")
			for _, m := range ms {
				applied := "no"
				if m.Applied {
					applied = m.AppliedAt.UTC().Format(time.RFC3339)
				}
				if m.Unknown {
					applied += " (unknown to this docket: a newer one applied it)"
				}
				fmt.Fprintf(tw, "%04d\t%s\t%s\n", m.Version, m.Name, applied)
			}
			return tw.Flush()
		},
	}
	for _, c := range []*cobra.Command{up, down, status} {
		u := databaseURLFlag(c, docket.DatabaseURLDefault)
		c.PreRun = func(*cobra.Command, []string) { url = u }
		cmd.AddCommand(c)
	}
	return cmd
}

func migrateDirection(dir string) docket.MigrateDirection {
	if dir == "down" {
		return docket.MigrateDown
	}
	return docket.MigrateUp
}
