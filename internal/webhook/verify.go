package webhook

// This file uses the standard library only: docs/events.md shows Verify as
// the function a receiver copies, and a test checks the two are the same.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// Sign returns the X-Docket-Signature of a delivery: "sha256=" and the
// hex HMAC-SHA256, keyed with the subscription's secret, of the
// X-Docket-Timestamp value, a dot, and the request body.
func Sign(secret, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(timestamp))
	mac.Write([]byte("."))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify checks a webhook delivery from docket: signature is the
// X-Docket-Signature header, timestamp the X-Docket-Timestamp header and
// body the raw request body. It returns nil when the signature is the
// HMAC-SHA256 of "<timestamp>.<body>" keyed with secret.
func Verify(secret, signature, timestamp string, body []byte) error {
	got, ok := strings.CutPrefix(signature, "sha256=")
	if !ok {
		return errors.New("signature: want sha256=<hex>")
	}
	sum, err := hex.DecodeString(got)
	if err != nil {
		return errors.New("signature: not hex")
	}
	if timestamp == "" {
		return errors.New("timestamp: missing")
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(timestamp + "."))
	mac.Write(body)
	if !hmac.Equal(sum, mac.Sum(nil)) {
		return errors.New("signature: does not match")
	}
	return nil
}
