package expr

import "cel.dev/cel-go/cel"

// Judges. `judges.<name>` is the list of who gave the answer of human
// step <name> (an ancestor, without forEach): one element per clean
// judgment of its unit, oldest first,
//
//	{"contributorId": "…", "trust": 0.8, "prior": 3}
//
// with the contributor's trust snapshot at submission (null when none
// was known) and how many judgments they had given in the step's pool
// before that one. It routes a review to new contributors' answers:
//
//	judges.label.exists(j, j.prior < 20)
//
// Only the expressions that use judges pay for it: the runtime reads the
// judgments of the steps a step's expressions name (Workflow.Judges) and
// adds them to the input document under "judges"; they are not part of
// a step's payload or unit input.

// judgesVar is the variable's name.
const judgesVar = "judges"

func judgesOptions() []cel.EnvOption {
	return []cel.EnvOption{cel.Variable(judgesVar, cel.MapType(cel.StringType, cel.DynType))}
}

// Judges returns the human steps whose judges the expressions of step
// read (judges.<name>), in order of appearance; nil for none.
func (w *Workflow) Judges(step string) []string {
	if sp := w.steps[step]; sp != nil {
		return sp.judges
	}
	return nil
}
