// Package natsurl masks the credentials in a list of NATS server URLs,
// for the event bus's health errors and logs (internal/events) and for
// serve's error about a wrong --nats-url (cmd/docket), which may not
// import internal/events: one function, so the two cannot drift apart.
package natsurl

import (
	"net/url"
	"strings"
)

// Redact is list, comma-separated NATS URLs, with each one's password, or
// its token (a user without password), replaced by "xxxxx"; a URL that
// does not parse is replaced whole, and in one where no user was parsed
// but that has an '@' ("nats:/alice:pw@a:4222", "alice:pw@a": the invalid
// URLs serve reports), all before the last '@' is.
func Redact(list string) string {
	parts := strings.Split(list, ",")
	for i, part := range parts {
		part = strings.TrimSpace(part)
		u, err := url.Parse(part)
		if err != nil {
			parts[i] = "(a URL that does not parse)"
			continue
		}
		if at := strings.LastIndex(part, "@"); u.User == nil && at >= 0 {
			parts[i] = "xxxxx" + part[at:]
			continue
		}
		if u.User == nil {
			parts[i] = part // as given ("nats://" stays so)
			continue
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			u.User = url.User("xxxxx")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
