package main

import (
	"fmt"
	"log/slog"
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
	}

	create := &cobra.Command{
		Use:   "create",
		Short: "Create an API key; the secret is printed once, alone on the last line",
		Args:  cobra.NoArgs,
	}
	createURL := databaseURLFlag(create, docket.DatabaseURLDefault)
	role := create.Flags().String("role", "", "admin, producer, worker or viewer (required)")
	name := create.Flags().String("name", "", "who or what the key is for (required)")
	create.RunE = func(cmd *cobra.Command, _ []string) error {
		client, err := openClient(cmd.Context(), *createURL, true, slog.LevelWarn)
		if err != nil {
			return err
		}
		defer client.Close()
		secret, k, err := client.CreateAPIKey(cmd.Context(), *name, docket.Role(*role))
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "created key %s (%s, role %s); store the secret now, it is not shown again:\n", k.ID, k.Name, k.Role)
		fmt.Fprintln(out, secret)
		return nil
	}

	list := &cobra.Command{Use: "list", Short: "List API keys", Args: cobra.NoArgs}
	listURL := databaseURLFlag(list, docket.DatabaseURLDefault)
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		client, err := openClient(cmd.Context(), *listURL, true, slog.LevelWarn)
		if err != nil {
			return err
		}
		defer client.Close()
		keys, err := client.APIKeys(cmd.Context())
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tROLE\tPREFIX\tCREATED\tREVOKED")
		for _, k := range keys {
			revoked := "-"
			if !k.RevokedAt.IsZero() {
				revoked = k.RevokedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s…\t%s\t%s\n", k.ID, k.Name, k.Role, k.Prefix, k.CreatedAt.Format(time.RFC3339), revoked)
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
		client, err := openClient(cmd.Context(), *revokeURL, true, slog.LevelWarn)
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
