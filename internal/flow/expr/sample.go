package expr

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// Sampling. `sample(rate)` is true for a fraction rate (0 to 1) of the
// runs, and always gives the same answer for one run and step, however
// often the expression is evaluated (a retried step, an advancement done
// again after a crash): the draw is a hash of the run's id and the
// step's name (and the fan-out index, for an `if` evaluated per
// instance), not a random number. Different steps of one run draw
// independently.
//
// The macro rewrites sample(rate) to sample(rate, _sample_key); the
// evaluation binds _sample_key to "<run id>/<step>[/<index>]".

// sampleKeyVar is the variable the sample macro reads its key from.
const sampleKeyVar = "_sample_key"

// sampleOptions declares sample in the environment.
func sampleOptions() []cel.EnvOption {
	return []cel.EnvOption{
		cel.Variable(sampleKeyVar, cel.StringType),
		cel.Macros(cel.GlobalMacro("sample", 1, func(eh cel.MacroExprFactory, _ ast.Expr, args []ast.Expr) (ast.Expr, *common.Error) {
			return eh.NewCall("sample", args[0], eh.NewIdent(sampleKeyVar)), nil
		})),
		cel.Function("sample",
			cel.Overload("sample_double_string", []*cel.Type{cel.DoubleType, cel.StringType}, cel.BoolType,
				cel.BinaryBinding(func(rate, key ref.Val) ref.Val {
					r, ok := rate.(types.Double)
					k, ok2 := key.(types.String)
					if !ok || !ok2 {
						return types.NewErr("sample: takes a rate (a double)")
					}
					in, err := Sample(float64(r), string(k))
					if err != nil {
						return types.NewErr("%v", err)
					}
					return types.Bool(in)
				}))),
	}
}

// Sample reports whether key falls in a sample of the given rate: the
// first 8 bytes of SHA-256(key), as a fraction of 2⁶⁴, are below rate.
// A rate outside 0..1 is an error.
func Sample(rate float64, key string) (bool, error) {
	if !(rate >= 0 && rate <= 1) {
		return false, fmt.Errorf("sample: the rate must be between 0 and 1, not %v", rate)
	}
	sum := sha256.Sum256([]byte(key))
	u := float64(binary.BigEndian.Uint64(sum[:8])) / math.Exp2(64)
	return u < rate, nil
}

// SampleKey is the key sample() draws with for step of run runID, and
// for one instance of a fan-out step when index is not nil.
func SampleKey(runID, step string, index *int64) string {
	if index != nil {
		return fmt.Sprintf("%s/%s/%d", runID, step, *index)
	}
	return runID + "/" + step
}
