package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/events"
	"github.com/docket-run/docket/internal/store"
)

// pruneEvery is how often the dispatcher deletes deliveries past retention.
const pruneEvery = time.Minute

// runDispatcher fans the outbox out into deliveries every PollInterval
// until ctx ends, and prunes old deliveries now and then.
func (s *Service) runDispatcher(ctx context.Context) {
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	var pruned time.Time
	for {
		if _, err := s.FanOut(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("webhook fan-out failed", attrError, err)
		}
		if now := s.cfg.Now(); now.Sub(pruned) >= pruneEvery {
			pruned = now
			s.prune(ctx, now)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// FanOut turns every outbox row not fanned out yet into one delivery per
// (subscription, event) whose type the subscription wants, and marks the
// rows, one transaction per batch of rows. It returns how many deliveries
// it inserted.
//
// With no subscription at all it leaves the rows written in the last
// noSubscriberGrace to the event relay, which marks them fanned out as it
// publishes them (one update of each row instead of two); a row the relay
// has not published by then (no relay runs, or the bus is down) is marked
// here as before. A subscription made meanwhile gets the rows still
// pending, as it gets any row fanned out after it exists.
//
// It reads the subscriptions after each batch of rows, so a subscription
// that exists when a row is read gets it; a pass that finds no row reads
// them once, to tell whether there is none.
//
// It never skips a row: it reads rows by their "not fanned out" mark, not
// above a cursor, so a row that committed after rows with higher ids is
// found on the next pass. It never duplicates a delivery: deliveries are
// unique per (subscription, event id), so a second pass or a second
// dispatcher that read the same rows inserts nothing. The leader runs it;
// tests call it directly.
func (s *Service) FanOut(ctx context.Context) (int, error) {
	hooks, err := s.store.WebhookList(ctx)
	if err != nil {
		return 0, err
	}
	if len(hooks) == 0 {
		if young, err := s.onlyYoungPending(ctx); err != nil || young {
			return 0, err
		}
	}
	total := 0
	for ctx.Err() == nil {
		rows, err := s.store.WebhookOutboxListPending(ctx, &store.WebhookOutboxListPendingParams{Limit: fanOutBatch})
		if err != nil {
			return total, err
		}
		if len(rows) == 0 {
			return total, nil
		}
		// Read again after the rows: a subscription made after the read
		// above, before an event that committed after it, must get it.
		if hooks, err = s.store.WebhookList(ctx); err != nil {
			return total, err
		}
		now := s.cfg.Now()
		p := &store.WebhookFanOutParams{Now: now, OutboxIDs: make([]int64, 0, len(rows))}
		left := false
		for _, row := range rows {
			if len(hooks) == 0 && row.CreatedAt.After(now.Add(-noSubscriberGrace)) {
				// Left to the relay, which marks a row fanned out when it
				// publishes it with no subscription: one update of the
				// row instead of two (store.OutboxStore.OutboxMarkPublished).
				left = true
				continue
			}
			p.OutboxIDs = append(p.OutboxIDs, row.ID)
			if len(hooks) == 0 {
				continue
			}
			ds, err := deliveriesOf(row, hooks)
			if err != nil {
				// A row that cannot be read would stop the fan-out for
				// good: it is marked and reported instead.
				s.log.Error("outbox row skipped by webhooks", "outbox_id", row.ID, attrError, err)
				continue
			}
			p.Deliveries = append(p.Deliveries, ds...)
		}
		if len(p.OutboxIDs) == 0 {
			return total, nil
		}
		n, err := s.store.WebhookFanOut(ctx, p)
		if err != nil {
			return total, err
		}
		total += n
		if n > 0 {
			s.log.Debug("fanned out webhook deliveries", attrCount, n)
			s.notify()
		}
		if len(rows) < fanOutBatch || left {
			break // the rows left would be read again
		}
	}
	return total, ctx.Err()
}

// onlyYoungPending reports whether the oldest row not fanned out (if
// any) is younger than noSubscriberGrace: then FanOut, with no
// subscription, has nothing to do (rows are written in about id order),
// and reading one row costs less than reading a batch of rows left to the
// relay on every pass.
func (s *Service) onlyYoungPending(ctx context.Context) (bool, error) {
	rows, err := s.store.WebhookOutboxListPending(ctx, &store.WebhookOutboxListPendingParams{Limit: 1})
	if err != nil {
		return false, err
	}
	return len(rows) == 0 || rows[0].CreatedAt.After(s.cfg.Now().Add(-noSubscriberGrace)), nil
}

// deliveriesOf expands one outbox row into its events and pairs each with
// the subscriptions that want its type. The payload is the envelope JSON,
// the body every attempt POSTs.
func deliveriesOf(row *store.OutboxEvent, hooks []*store.Webhook) ([]*store.WebhookDeliveryInsertParams, error) {
	evs, err := events.Expand(row)
	if err != nil {
		return nil, err
	}
	var out []*store.WebhookDeliveryInsertParams
	for i, ev := range evs {
		var body []byte
		for _, w := range hooks {
			if !matches(w, ev.Type) {
				continue
			}
			if body == nil {
				if body, err = json.Marshal(ev); err != nil {
					return nil, fmt.Errorf("encode event %s: %w", ev.ID, err)
				}
			}
			out = append(out, &store.WebhookDeliveryInsertParams{
				ID: uuid.Must(uuid.NewV7()), WebhookID: w.ID, EventID: ev.ID, EventType: ev.Type,
				OutboxID: row.ID, EventIndex: i, Payload: body,
			})
		}
	}
	return out, nil
}

// prune deletes DELIVERED and DEAD deliveries past retention.
func (s *Service) prune(ctx context.Context, now time.Time) {
	for ctx.Err() == nil {
		n, err := s.store.WebhookDeliveryDeleteFinished(ctx, &store.WebhookDeliveryDeleteFinishedParams{
			FinishedBefore: now.Add(-s.cfg.Retention), Max: 1000,
		})
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("prune webhook deliveries failed", attrError, err)
			}
			return
		}
		if n > 0 {
			s.log.Info("pruned webhook deliveries", attrCount, n)
		}
		if n < 1000 {
			return
		}
	}
}
