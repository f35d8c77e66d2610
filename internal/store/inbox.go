package store

// InboxStore is the part of Store durable event consumers use: exactly-once
// effects through an inbox of handled event ids, and dead letters. Filled in
// by the events work.
type InboxStore interface{}
