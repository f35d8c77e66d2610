package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/store"
)

const webhookColumns = `id, url, event_types, secret, created_at`

func scanWebhook(row scanner) (*store.Webhook, error) {
	var (
		w       store.Webhook
		id      string
		types   []byte
		created int64
	)
	if err := row.Scan(&id, &w.URL, &types, &w.Secret, &created); err != nil {
		return nil, err
	}
	var err error
	if w.ID, err = uuid.Parse(id); err != nil {
		return nil, fmt.Errorf("webhook id %q: %w", id, err)
	}
	if err := json.Unmarshal(types, &w.EventTypes); err != nil {
		return nil, fmt.Errorf("webhook %s event types: %w", w.ID, err)
	}
	w.CreatedAt = fromMicros(created)
	return &w, nil
}

// WebhookInsert implements store.Store.
func (s *Store) WebhookInsert(ctx context.Context, p *store.WebhookInsertParams) (*store.Webhook, error) {
	var w *store.Webhook
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		w, err = webhookInsert(ctx, tx, p)
		return err
	})
	return w, err
}

// webhookInsert records a subscription in tx.
func webhookInsert(ctx context.Context, tx *sql.Tx, p *store.WebhookInsertParams) (*store.Webhook, error) {
	types, err := json.Marshal(p.EventTypes)
	if err != nil {
		return nil, fmt.Errorf("encode webhook event types: %w", err)
	}
	w, err := scanWebhook(tx.QueryRowContext(ctx, `INSERT INTO docket_webhooks (id, url, event_types, secret, created_at)
		VALUES (?, ?, ?, ?, ?) RETURNING `+webhookColumns,
		p.ID.String(), p.URL, string(types), p.Secret, micros(p.Now)))
	if err != nil {
		return nil, fmt.Errorf("insert webhook: %w", err)
	}
	return w, nil
}

// WebhookGet implements store.Store.
func (s *Store) WebhookGet(ctx context.Context, id uuid.UUID) (*store.Webhook, error) {
	return webhookGet(ctx, s.reader, id)
}

// webhookGet reads a subscription through c.
func webhookGet(ctx context.Context, c conn, id uuid.UUID) (*store.Webhook, error) {
	w, err := scanWebhook(c.QueryRowContext(ctx, `SELECT `+webhookColumns+` FROM docket_webhooks WHERE id = ?`, id.String()))
	if err != nil {
		return nil, fmt.Errorf("get webhook %s: %w", id, notFound(err))
	}
	return w, nil
}

// WebhookList implements store.Store.
func (s *Store) WebhookList(ctx context.Context) ([]*store.Webhook, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+webhookColumns+` FROM docket_webhooks ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	defer rows.Close()
	var out []*store.Webhook
	for rows.Next() {
		w, err := scanWebhook(rows)
		if err != nil {
			return nil, fmt.Errorf("list webhooks: %w", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	return out, nil
}

// WebhookDelete implements store.Store. Deliveries go with it (ON DELETE
// CASCADE; foreign keys are on for every connection).
func (s *Store) WebhookDelete(ctx context.Context, id uuid.UUID) error {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM docket_webhooks WHERE id = ?`, id.String())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("delete webhook %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("delete webhook %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// WebhookOutboxListPending implements store.Store through the partial
// index docket_outbox_webhooks_pending.
func (s *Store) WebhookOutboxListPending(ctx context.Context, p *store.WebhookOutboxListPendingParams) ([]*store.OutboxEvent, error) {
	out, err := s.queryOutbox(ctx, `
		SELECT id, event_type, data, created_at FROM docket_outbox
		WHERE webhooks_at IS NULL ORDER BY id LIMIT ?`, limit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list outbox rows to fan out: %w", err)
	}
	return out, nil
}

// insertDeliverySQL skips deliveries of webhooks deleted meanwhile and
// those that exist.
const insertDeliverySQL = `INSERT INTO docket_webhook_deliveries (id, webhook_id, event_id, event_type, outbox_id,
	event_index, payload, state, next_attempt_at, created_at, updated_at)
SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, 'PENDING', ?8, ?8, ?8
WHERE EXISTS (SELECT 1 FROM docket_webhooks WHERE id = ?2)
ON CONFLICT (webhook_id, event_id) DO NOTHING`

// WebhookFanOut implements store.Store.
func (s *Store) WebhookFanOut(ctx context.Context, p *store.WebhookFanOutParams) (int, error) {
	outboxIDs, err := json.Marshal(p.OutboxIDs)
	if err != nil {
		return 0, err
	}
	now := micros(p.Now)
	var inserted int64
	err = s.write(ctx, func(tx *sql.Tx) error {
		for _, d := range p.Deliveries {
			res, err := tx.ExecContext(ctx, insertDeliverySQL, d.ID.String(), d.WebhookID.String(), d.EventID, d.EventType,
				d.OutboxID, d.EventIndex, string(d.Payload), now)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			inserted += n
		}
		_, err := tx.ExecContext(ctx, `UPDATE docket_outbox SET webhooks_at = ?
			WHERE id IN (SELECT value FROM json_each(?)) AND webhooks_at IS NULL`, now, string(outboxIDs))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("fan out %d outbox rows to webhooks: %w", len(p.OutboxIDs), err)
	}
	return int(inserted), nil
}

const deliveryColumns = `id, webhook_id, event_id, event_type, outbox_id, event_index, payload, state,
	attempts, last_status_code, last_error, next_attempt_at, created_at, updated_at, last_attempt_at, finished_at`

func scanDelivery(row scanner) (*store.WebhookDelivery, error) {
	var (
		d                      store.WebhookDelivery
		id, hook, state        string
		payload                []byte
		next, created, updated int64
		lastAttempt, finished  sql.NullInt64
	)
	if err := row.Scan(&id, &hook, &d.EventID, &d.EventType, &d.OutboxID, &d.EventIndex, &payload, &state,
		&d.Attempts, &d.LastStatusCode, &d.LastError, &next, &created, &updated, &lastAttempt, &finished); err != nil {
		return nil, err
	}
	var err error
	if d.ID, err = uuid.Parse(id); err != nil {
		return nil, fmt.Errorf("delivery id %q: %w", id, err)
	}
	if d.WebhookID, err = uuid.Parse(hook); err != nil {
		return nil, fmt.Errorf("delivery %s webhook id %q: %w", d.ID, hook, err)
	}
	d.Payload = json.RawMessage(payload)
	d.State = store.WebhookDeliveryState(state)
	d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = fromMicros(next), fromMicros(created), fromMicros(updated)
	d.LastAttemptAt, d.FinishedAt = fromNullMicros(lastAttempt), fromNullMicros(finished)
	return &d, nil
}

func collectDeliveries(rows *sql.Rows) ([]*store.WebhookDelivery, error) {
	defer rows.Close()
	var out []*store.WebhookDelivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// webhookClaimSQL takes the due deliveries, at most ?3 per webhook in event
// order; the write transaction is the lock.
const webhookClaimSQL = `
UPDATE docket_webhook_deliveries
SET attempts = attempts + 1, next_attempt_at = ?5, updated_at = ?1, claimed_by = ?6
WHERE id IN (
	SELECT id FROM (
		SELECT id, outbox_id, event_index,
			row_number() OVER (PARTITION BY webhook_id ORDER BY outbox_id, event_index) AS rank
		FROM docket_webhook_deliveries
		WHERE state = 'PENDING' AND next_attempt_at <= ?1
			AND webhook_id NOT IN (SELECT value FROM json_each(?4))
	)
	WHERE rank <= ?3
	ORDER BY outbox_id, event_index
	LIMIT ?2)
RETURNING ` + deliveryColumns

// WebhookDeliveryClaim implements store.Store.
func (s *Store) WebhookDeliveryClaim(ctx context.Context, p *store.WebhookDeliveryClaimParams) ([]*store.WebhookDelivery, error) {
	exclude := make([]string, len(p.Exclude))
	for i, id := range p.Exclude {
		exclude[i] = id.String()
	}
	excl, err := json.Marshal(exclude)
	if err != nil {
		return nil, err
	}
	var out []*store.WebhookDelivery
	err = s.write(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, webhookClaimSQL, micros(p.Now), limit(p.Max), max(p.PerWebhook, 1),
			string(excl), micros(p.LeaseUntil), p.NodeID)
		if err != nil {
			return err
		}
		out, err = collectDeliveries(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: %w", err)
	}
	// RETURNING gives no order.
	slices.SortFunc(out, func(a, b *store.WebhookDelivery) int {
		return cmp.Or(cmp.Compare(a.OutboxID, b.OutboxID), cmp.Compare(a.EventIndex, b.EventIndex))
	})
	return out, nil
}

// exec runs one statement in a write transaction and returns the rows it
// changed.
func (s *Store) exec(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// WebhookDeliveryFinish implements store.Store.
func (s *Store) WebhookDeliveryFinish(ctx context.Context, p *store.WebhookDeliveryFinishParams) (bool, error) {
	now := micros(p.Now)
	next, finished := micros(p.NextAttemptAt), sql.NullInt64{Int64: now, Valid: true}
	if p.State == store.DeliveryPending {
		finished = sql.NullInt64{}
	} else {
		next = now
	}
	n, err := s.exec(ctx, `UPDATE docket_webhook_deliveries
		SET state = ?, last_status_code = ?, last_error = ?, next_attempt_at = ?, finished_at = ?, updated_at = ?,
			last_attempt_at = ?, claimed_by = NULL
		WHERE id = ? AND attempts = ? AND state = 'PENDING'`,
		string(p.State), p.StatusCode, p.Error, next, finished, now, micros(p.AttemptedAtOrNow()), p.ID.String(), p.Attempt)
	if err != nil {
		return false, fmt.Errorf("finish webhook delivery %s: %w", p.ID, err)
	}
	return n == 1, nil
}

// WebhookDeliveryRelease implements store.Store.
func (s *Store) WebhookDeliveryRelease(ctx context.Context, p *store.WebhookDeliveryReleaseParams) (bool, error) {
	n, err := s.exec(ctx, `UPDATE docket_webhook_deliveries
		SET attempts = attempts - 1, next_attempt_at = ?, updated_at = ?, claimed_by = NULL
		WHERE id = ? AND attempts = ? AND state = 'PENDING'`,
		micros(p.NextAttemptAt), micros(p.Now), p.ID.String(), p.Attempt)
	if err != nil {
		return false, fmt.Errorf("release webhook delivery %s: %w", p.ID, err)
	}
	return n == 1, nil
}

// WebhookDeliveryReclaim implements store.Store. It reads every PENDING
// delivery (the partial index of due ones): once per term of the
// webhooks leadership.
func (s *Store) WebhookDeliveryReclaim(ctx context.Context, p *store.WebhookDeliveryReclaimParams) (int, error) {
	now := micros(p.Now)
	n, err := s.exec(ctx, `UPDATE docket_webhook_deliveries
		SET next_attempt_at = ?, updated_at = ?, claimed_by = NULL
		WHERE state = 'PENDING' AND claimed_by IS NOT NULL AND claimed_by <> ?`, now, now, p.NodeID)
	if err != nil {
		return 0, fmt.Errorf("reclaim webhook deliveries: %w", err)
	}
	return int(n), nil
}

// webhookSkipSQL counts a due attempt not made for the due deliveries of
// the webhooks ?1 (a JSON array), oldest event first. ?5 is the JSON array
// of delays in microseconds, [n-1] after attempt n; SET reads the row as
// it was. It ends an old claim of the row (expired, since the row is
// due), so that a new holder's reclaim does not bring it forward past the
// backoff set here.
const webhookSkipSQL = `
UPDATE docket_webhook_deliveries
SET attempts = attempts + 1, last_status_code = 0, last_error = ?3, updated_at = ?2, claimed_by = NULL,
	state = CASE WHEN attempts + 1 >= ?4 THEN 'DEAD' ELSE 'PENDING' END,
	finished_at = CASE WHEN attempts + 1 >= ?4 THEN ?2 END,
	next_attempt_at = CASE WHEN attempts + 1 >= ?4 THEN ?2
		ELSE ?2 + json_extract(?5, '$[' || attempts || ']') END
WHERE id IN (
	SELECT id FROM docket_webhook_deliveries
	WHERE state = 'PENDING' AND next_attempt_at <= ?2 AND webhook_id IN (SELECT value FROM json_each(?1))
	ORDER BY outbox_id, event_index
	LIMIT ?6)`

// WebhookDeliverySkip implements store.Store.
func (s *Store) WebhookDeliverySkip(ctx context.Context, p *store.WebhookDeliverySkipParams) (int, error) {
	if err := p.Check(); err != nil {
		return 0, err
	}
	hooks := make([]string, len(p.WebhookIDs))
	for i, id := range p.WebhookIDs {
		hooks[i] = id.String()
	}
	ids, err := json.Marshal(hooks)
	if err != nil {
		return 0, err
	}
	delays, err := json.Marshal(p.DelayMicros())
	if err != nil {
		return 0, err
	}
	n, err := s.exec(ctx, webhookSkipSQL, string(ids), micros(p.Now), p.Error, p.MaxAttempts, string(delays), limit(p.Max))
	if err != nil {
		return 0, fmt.Errorf("skip webhook deliveries: %w", err)
	}
	return int(n), nil
}

// WebhookDeliveryHasten implements store.Store.
func (s *Store) WebhookDeliveryHasten(ctx context.Context, p *store.WebhookDeliveryHastenParams) (*store.WebhookDeliveryHastenResult, error) {
	var r store.WebhookDeliveryHastenResult
	id, now, before := p.WebhookID.String(), micros(p.Now), micros(p.Before)
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM docket_webhook_deliveries
			WHERE webhook_id = ?1 AND state = 'PENDING' AND next_attempt_at <= ?2
				AND created_at < ?3 AND (last_attempt_at IS NULL OR last_attempt_at < ?3)`,
			id, now, before).Scan(&r.Waiting); err != nil || r.Waiting > 0 {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE docket_webhook_deliveries SET next_attempt_at = ?2, updated_at = ?2
			WHERE id IN (
				SELECT id FROM docket_webhook_deliveries
				WHERE webhook_id = ?1 AND state = 'PENDING' AND next_attempt_at > ?2
					AND created_at < ?3 AND (last_attempt_at IS NULL OR last_attempt_at < ?3)
				ORDER BY outbox_id, event_index
				LIMIT ?4)`,
			id, now, before, limit(p.Max))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		r.Hastened = int(n)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("hasten deliveries of webhook %s: %w", p.WebhookID, err)
	}
	return &r, nil
}

// WebhookDeliveryList implements store.Store.
func (s *Store) WebhookDeliveryList(ctx context.Context, p *store.WebhookDeliveryListParams) ([]*store.WebhookDelivery, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+deliveryColumns+` FROM docket_webhook_deliveries
		WHERE webhook_id = ?1 AND (?2 = '' OR state = ?2)
		ORDER BY outbox_id DESC, event_index DESC
		LIMIT ?3`, p.WebhookID.String(), string(p.State), limit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list deliveries of webhook %s: %w", p.WebhookID, err)
	}
	out, err := collectDeliveries(rows)
	if err != nil {
		return nil, fmt.Errorf("list deliveries of webhook %s: %w", p.WebhookID, err)
	}
	return out, nil
}

// WebhookDeliveryRedeliver implements store.Store.
func (s *Store) WebhookDeliveryRedeliver(ctx context.Context, p *store.WebhookDeliveryRedeliverParams) (*store.WebhookDelivery, error) {
	var d *store.WebhookDelivery
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE docket_webhook_deliveries
			SET state = 'PENDING', attempts = 0, next_attempt_at = ?3, finished_at = NULL, updated_at = ?3
			WHERE id = ?1 AND webhook_id = ?2 AND state IN ('DELIVERED', 'DEAD')`,
			p.ID.String(), p.WebhookID.String(), micros(p.Now)); err != nil {
			return err
		}
		var err error
		d, err = scanDelivery(tx.QueryRowContext(ctx, `SELECT `+deliveryColumns+` FROM docket_webhook_deliveries
			WHERE id = ? AND webhook_id = ?`, p.ID.String(), p.WebhookID.String()))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("redeliver webhook delivery %s: %w", p.ID, notFound(err))
	}
	return d, nil
}

// WebhookDeliveryDeleteFinished implements store.Store.
func (s *Store) WebhookDeliveryDeleteFinished(ctx context.Context, p *store.WebhookDeliveryDeleteFinishedParams) (int, error) {
	n, err := s.exec(ctx, `DELETE FROM docket_webhook_deliveries WHERE id IN (
		SELECT id FROM docket_webhook_deliveries
		WHERE finished_at < ? AND state IN ('DELIVERED', 'DEAD')
		LIMIT ?)`, micros(p.FinishedBefore), limit(p.Max))
	if err != nil {
		return 0, fmt.Errorf("delete finished webhook deliveries: %w", err)
	}
	return int(n), nil
}
