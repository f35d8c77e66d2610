package docket

// ValidateRunStart makes RunStartMany's checks of one run without writing
// anything: the workflow name, the input (encodable JSON without NUL), the
// idempotency key and the version. The error names each bad field (one
// *ValidationError, or several joined). It does not look the workflow up.
func ValidateRunStart(p RunStartParams) error {
	_, err := runStartParams(p)
	return err
}
