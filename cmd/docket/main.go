// Command docket runs and manages docket: the server (serve), remote
// workers (worker), jobs (job), workflow definitions (workflow), API keys
// (keys), migrations (migrate), the benchmark (bench) and the demo (demo).
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/docket-run/docket"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, rootCommand(), os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "docket",
		Short: "A durable platform for asynchronous work",
		Long: "A durable platform for asynchronous work.\n\n" +
			"Exit status: 0 on success, 1 when the command ran and failed (the server's\n" +
			"problems included), 2 when the command line is wrong (nothing was done).",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(migrateCommand(), demoCommand(), keysCommand(), benchCommand(), serveCommand(), jobCommand(), workerCommand(), workflowCommand(), runCommand())
	root.AddCommand(aggregateCommand())
	root.AddCommand(taskCommand(), contributorCommand(), poolCommand(), crowdCommand())
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every command that only groups others
// (docket migrate, docket keys, …) refuse a word that names none of them:
// cobra checks that on the root only, and shows the help and exits 0
// below it, so a mistyped "docket migrate upp" would pass in a script.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if !c.HasParent() || !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unknown command %q for %q (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())
		}
		return cmd.Help()
	}
}

// databaseURLFlag adds --database-url, defaulting to $DOCKET_DATABASE_URL,
// then to the embedded SQLite file.
func databaseURLFlag(cmd *cobra.Command, def string) *string {
	if env := os.Getenv("DOCKET_DATABASE_URL"); env != "" {
		def = env
	}
	return cmd.Flags().String("database-url", def,
		"database: postgres://… or sqlite:PATH (env DOCKET_DATABASE_URL)")
}

// openClient opens the database; logs go to stderr at level and above.
func openClient(ctx context.Context, url string, migrate bool, level slog.Level) (*docket.Client, error) {
	return openClientConfig(ctx, docket.Config{DatabaseURL: url, AutoMigrate: migrate}, level)
}

// openClientConfig is openClient with more of the client's Config.
func openClientConfig(ctx context.Context, cfg docket.Config, level slog.Level) (*docket.Client, error) {
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return docket.NewClient(ctx, cfg)
}
