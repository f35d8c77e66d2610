package workflow

import (
	"fmt"
	"sync"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/flow/expr"
)

// checkEnv is the CEL environment Validate compiles in, built on first
// use.
var checkEnv = sync.OnceValues(expr.NewEnv)

// Validate checks a definition before it is stored: its structure and its
// expressions (each `if` a bool, each `forEach` a list, naming only
// parents). The error is a *flow.ValidationError naming every bad field.
// It is the one check of Client.WorkflowPut and PUT /v1/workflows/{name}.
func Validate(def *flow.Definition) error {
	env, err := checkEnv()
	if err != nil {
		return fmt.Errorf("validate workflow: %w", err)
	}
	_, err = env.Compile(def)
	return err
}
