package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/docket-run/docket"
)

func keysCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Create, list and revoke API keys (works on the database directly)",
		Long: `Create, list and revoke API keys, working on the database directly.

The database must exist and be migrated (docket serve migrates on start, or
run docket migrate up): these commands never create or migrate one, so a
mistyped --database-url fails instead of making a new database.`,
	}

	create := &cobra.Command{
		Use:   "create",
		Short: "Create an API key; the secret is printed once, alone on the last line",
		Args:  cobra.NoArgs,
	}
	createURL := databaseURLFlag(create, docket.DatabaseURLDefault)
	role := create.Flags().String("role", "", "admin, producer, worker or viewer (required)")
	name := create.Flags().String("name", "", "who or what the key is for (required)")
	queues := create.Flags().StringSlice("queues", nil, "worker keys only: the queues the key may lease from (comma-separated or repeated; default any queue)")
	create.RunE = func(cmd *cobra.Command, _ []string) error {
		scoped := cmd.Flags().Changed("queues")
		if scoped && docket.Role(*role) != docket.RoleWorker {
			return usageErrorf("--queues: only worker keys are scoped to queues (this key's role is %q)", *role)
		}
		client, err := openMigrated(cmd.Context(), *createURL)
		if err != nil {
			return err
		}
		defer client.Close()
		var (
			secret string
			k      *docket.APIKey
		)
		if scoped {
			secret, k, err = client.CreateWorkerKey(cmd.Context(), *name, *queues)
		} else {
			secret, k, err = client.CreateAPIKey(cmd.Context(), *name, docket.Role(*role))
		}
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		scope := ""
		if k.Queues != nil {
			scope = ", queues " + strings.Join(k.Queues, ",")
		}
		fmt.Fprintf(out, "created key %s (%s, role %s%s); store the secret now, it is not shown again:\n", k.ID, k.Name, k.Role, scope)
		fmt.Fprintln(out, secret)
		return nil
	}

	list := &cobra.Command{Use: "list", Short: "List API keys", Args: cobra.NoArgs}
	listURL := databaseURLFlag(list, docket.DatabaseURLDefault)
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		client, err := openMigrated(cmd.Context(), *listURL)
		if err != nil {
			return err
		}
		defer client.Close()
		keys, err := client.APIKeys(cmd.Context())
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tROLE\tQUEUES\tPREFIX\tCREATED\tREVOKED")
		for _, k := range keys {
			revoked := "-"
			if !k.RevokedAt.IsZero() {
				revoked = k.RevokedAt.Format(time.RFC3339)
			}
			queues := "*" // any queue
			if k.Queues != nil {
				queues = strings.Join(k.Queues, ",")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s…\t%s\t%s\n", k.ID, k.Name, k.Role, queues, k.Prefix, k.CreatedAt.Format(time.RFC3339), revoked)
		}
		return tw.Flush()
	}

	revoke := &cobra.Command{Use: "revoke KEY-ID", Short: "Revoke an API key", Args: cobra.ExactArgs(1)}
	revokeURL := databaseURLFlag(revoke, docket.DatabaseURLDefault)
	revoke.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := uuid.Parse(args[0])
		if err != nil {
			return fmt.Errorf("key id %q: not a UUID (see docket keys list)", args[0])
		}
		client, err := openMigrated(cmd.Context(), *revokeURL)
		if err != nil {
			return err
		}
		defer client.Close()
		if err := client.RevokeAPIKey(cmd.Context(), id); err != nil {
			return fmt.Errorf("revoke %s: %w", id, err)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "revoked key %s\n", id)
		return nil
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

// openMigrated opens the database at databaseURL for a keys command without
// creating or migrating it: a mistyped URL must not make a new database, nor
// a newer CLI migrate a database its servers are still using. It fails when
// a migration is pending.
func openMigrated(ctx context.Context, databaseURL string) (*docket.Client, error) {
	shown := displayURL(databaseURL)
	client, err := openExisting(ctx, databaseURL, slog.LevelWarn)
	if err != nil {
		return nil, err
	}
	ms, err := client.MigrationStatus(ctx)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("read the migrations of the database at %s: %w", shown, err)
	}
	for _, m := range ms {
		if !m.Applied {
			_ = client.Close()
			return nil, fmt.Errorf("the database at %s is not migrated (migration %04d_%s is pending): run docket migrate up",
				shown, m.Version, m.Name)
		}
	}
	return client, nil
}

// openExisting opens the database at databaseURL without migrating it,
// refusing a SQLite path where there is no file: opening would create an
// empty database there, and a mistyped URL must not.
func openExisting(ctx context.Context, databaseURL string, level slog.Level) (*docket.Client, error) {
	path, ok, err := docket.SQLitePath(databaseURL)
	if err != nil {
		return nil, err // a URL the client refuses: no path to look for
	}
	if ok {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("there is no database at %s: check --database-url (docket serve or docket migrate up creates it)", displayURL(databaseURL))
		}
	}
	return openClient(ctx, databaseURL, false, level)
}

// displayURL is a database URL fit for messages: without its password.
func displayURL(databaseURL string) string {
	if u, err := url.Parse(databaseURL); err == nil && u.User != nil {
		return u.Redacted()
	}
	return databaseURL
}
