package docket_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

func newWorkflowClient(t *testing.T, backend testdb.Backend) *docket.Client {
	t.Helper()
	client, err := docket.NewClient(context.Background(), docket.Config{DatabaseURL: backend.URL(t), AutoMigrate: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func TestWorkflowPutGetList(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			client := newWorkflowClient(t, backend)

			def, err := docket.DecodeWorkflow([]byte(designExample))
			require.NoError(t, err)
			hash, err := docket.WorkflowHash(def)
			require.NoError(t, err)

			v1, created, err := client.WorkflowPut(ctx, def)
			require.NoError(t, err)
			require.True(t, created)
			require.Equal(t, "product-match", v1.Name)
			require.Equal(t, 1, v1.Version)
			require.Equal(t, hash, v1.Hash)
			require.WithinDuration(t, time.Now(), v1.CreatedAt, time.Minute)
			// The stored (canonical) definition has the same content.
			again, err := docket.WorkflowHash(v1.Definition)
			require.NoError(t, err)
			require.Equal(t, hash, again)

			// The same content, built in Go (key order and spelled-out
			// durations differ): a no-op that returns version 1.
			same, created, err := client.WorkflowPut(ctx, mustDefinition(t, buildDesignExample()))
			require.NoError(t, err)
			require.False(t, created)
			require.Equal(t, v1.Version, same.Version)
			require.Equal(t, v1.Hash, same.Hash)
			require.True(t, v1.CreatedAt.Equal(same.CreatedAt))

			// Changed content: version 2, and version 1 is still there.
			changed := mustDefinition(t, buildDesignExample().Job("archive", "archive", docket.After("publish")))
			v2, created, err := client.WorkflowPut(ctx, changed)
			require.NoError(t, err)
			require.True(t, created)
			require.Equal(t, 2, v2.Version)
			require.NotEqual(t, v1.Hash, v2.Hash)

			latest, err := client.WorkflowGet(ctx, "product-match", 0)
			require.NoError(t, err)
			require.Equal(t, v2.Hash, latest.Hash)
			require.Len(t, latest.Definition.Steps, 7)
			first, err := client.WorkflowGet(ctx, "product-match", 1)
			require.NoError(t, err)
			require.Equal(t, v1.Hash, first.Hash)
			require.Len(t, first.Definition.Steps, 6)

			_, err = client.WorkflowGet(ctx, "product-match", 3)
			require.ErrorIs(t, err, docket.ErrNotFound)
			_, err = client.WorkflowGet(ctx, "nope", 0)
			require.ErrorIs(t, err, docket.ErrNotFound)
			_, err = client.WorkflowGet(ctx, "product-match", -1)
			require.ErrorContains(t, err, "version -1")

			// Paging by name, the latest version of each.
			for _, name := range []string{"c-flow", "a-flow", "b-flow"} {
				_, _, err := client.WorkflowPut(ctx, mustDefinition(t, docket.NewWorkflow(name).Job("only", "t")))
				require.NoError(t, err)
			}
			var names []string
			var versions []int
			after := ""
			for page := 0; ; page++ {
				require.Less(t, page, 10)
				list, err := client.WorkflowList(ctx, docket.WorkflowListParams{After: after, Limit: 3})
				require.NoError(t, err)
				if len(list) == 0 {
					break
				}
				require.LessOrEqual(t, len(list), 3)
				for _, v := range list {
					names = append(names, v.Name)
					versions = append(versions, v.Version)
				}
				after = list[len(list)-1].Name
			}
			require.Equal(t, []string{"a-flow", "b-flow", "c-flow", "product-match"}, names)
			require.Equal(t, []int{1, 1, 1, 2}, versions)
		})
	}
}

// WorkflowPut validates the structure and the CEL expressions and stores
// nothing when either is invalid.
func TestWorkflowPutValidates(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			client := newWorkflowClient(t, backend)

			bad := &docket.WorkflowDefinition{Name: "bad", Steps: []docket.WorkflowStep{
				{Name: "a", Job: &docket.JobStep{Type: "t"}, After: []string{"b"}},
				{Name: "b", Job: &docket.JobStep{Type: "t"}, After: []string{"a"}},
				{Name: "c", After: []string{"zz"}},
			}}
			_, _, err := client.WorkflowPut(ctx, bad)
			var ve *docket.WorkflowValidationError
			require.True(t, errors.As(err, &ve), "%v", err)
			var fields []string
			for _, fe := range ve.Errors {
				fields = append(fields, fe.Field)
			}
			require.ElementsMatch(t, []string{"steps[2]", "steps[2].after[0]", "steps[1].after[0]"}, fields, fmt.Sprint(ve.Errors))
			_, err = client.WorkflowGet(ctx, "bad", 0)
			require.ErrorIs(t, err, docket.ErrNotFound, "an invalid definition is not stored")

			_, _, err = client.WorkflowPut(ctx, nil)
			require.True(t, errors.As(err, &ve), "%v", err)

			uncompiled := mustDefinition(t, docket.NewWorkflow("cel-now").
				Job("a", "t").
				Job("b", "t", docket.After("a"), docket.If("steps.nope ==")).
				Job("c", "t", docket.After("a"), docket.ForEach("steps.a.output.n > 1")))
			_, _, err = client.WorkflowPut(ctx, uncompiled)
			require.True(t, errors.As(err, &ve), "%v", err)
			fields = nil
			for _, fe := range ve.Errors {
				fields = append(fields, fe.Field)
			}
			require.ElementsMatch(t, []string{"steps[1].if", "steps[2].forEach"}, fields, fmt.Sprint(ve.Errors))
			_, err = client.WorkflowGet(ctx, "cel-now", 0)
			require.ErrorIs(t, err, docket.ErrNotFound, "a definition whose expressions do not compile is not stored")
		})
	}
}

func mustDefinition(t *testing.T, b *docket.WorkflowBuilder) *docket.WorkflowDefinition {
	t.Helper()
	def, err := b.Definition()
	require.NoError(t, err)
	return def
}
