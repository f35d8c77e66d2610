package docket_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestFiltersNotTextAreValidationErrors: a filter, cursor or name that no
// database can store (NUL, bytes that are not UTF-8) is refused by the
// store on both backends; the job, key, workflow and event calls return
// it as they document their bad input, errors.Join of *ValidationError
// naming each field, not as the crowd calls' error type.
func TestFiltersNotTextAreValidationErrors(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		fields := func(err error) []string {
			t.Helper()
			require.Error(t, err)
			var crowdErr *docket.CrowdValidationError
			require.False(t, errors.As(err, &crowdErr), "%v is the crowd calls' error", err)
			var out []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var ve *docket.ValidationError
				require.ErrorAs(t, e, &ve)
				out = append(out, ve.Field)
			}
			return out
		}
		_, err := b.client.List(ctx, docket.ListParams{Types: []string{"ok", "a\x00b"}, Queues: []string{"a\xffb"}})
		require.Equal(t, []string{"types[1]", "queues[0]"}, fields(err))
		_, err = b.client.RunList(ctx, docket.RunListParams{Workflow: "a\x00b"})
		require.Equal(t, []string{"workflow"}, fields(err))
		_, err = b.client.WorkflowList(ctx, docket.WorkflowListParams{After: "a\xffb"})
		require.Equal(t, []string{"after"}, fields(err))
		_, err = b.client.WorkflowGet(ctx, "a\x00b", 0)
		require.Equal(t, []string{"name"}, fields(err))
		_, err = b.client.DeadLetterList(ctx, docket.DeadLetterListParams{Consumer: "a\x00b"})
		require.Equal(t, []string{"consumer"}, fields(err))
		_, _, err = b.client.CreateAPIKey(ctx, "a\x00b", docket.RoleViewer)
		require.Equal(t, []string{"name"}, fields(err))
	})
}
