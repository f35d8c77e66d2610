package job

// What a change writes besides the state: the attempt's outcome and the
// job's last error. Both stores follow these rules, so a job reads the same
// on PostgreSQL and on SQLite after the same changes.

// OutcomeOf is o, or, when o is empty, the outcome implied by ending an
// attempt in state to: success for SUCCESS, canceled for CANCELED, error
// otherwise.
func OutcomeOf(to State, o Outcome) Outcome {
	if o != "" {
		return o
	}
	switch to {
	case StateSuccess:
		return OutcomeSuccess
	case StateCanceled:
		return OutcomeCanceled
	default:
		return OutcomeError
	}
}

// SetsLastError reports whether a change from → to carrying the error
// message msg replaces the job's last error with msg.
//
// A job's last error is the error of its latest failed attempt, or an
// explanation given with a later change. So:
//   - an attempt that ends other than in SUCCESS (from RUNNING) always
//     sets it, even to "": a reader must not take an older attempt's
//     message for the latest failure's (the attempt history keeps every
//     attempt's own);
//   - SUCCESS never does: the last failure before it stays readable;
//   - any other change (RETRY → DEAD, QUEUED → CANCELED, …) sets it only
//     when it carries a message, and otherwise leaves the last attempt's.
func SetsLastError(from, to State, msg string) bool {
	switch {
	case to == StateSuccess:
		return false
	case from == StateRunning:
		return true
	default:
		return msg != ""
	}
}
