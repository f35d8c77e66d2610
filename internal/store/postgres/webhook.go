package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/store"
)

const webhookColumns = `id, url, event_types, secret, created_at`

func scanWebhook(row pgx.Row) (*store.Webhook, error) {
	var w store.Webhook
	var types []byte
	if err := row.Scan(&w.ID, &w.URL, &types, &w.Secret, &w.CreatedAt); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(types, &w.EventTypes); err != nil {
		return nil, fmt.Errorf("webhook %s event types: %w", w.ID, err)
	}
	w.CreatedAt = w.CreatedAt.UTC()
	return &w, nil
}

// WebhookInsert implements store.Store.
func (s *Store) WebhookInsert(ctx context.Context, p *store.WebhookInsertParams) (*store.Webhook, error) {
	return webhookInsert(ctx, s.pool, p)
}

// webhookInsert records a subscription through c.
func webhookInsert(ctx context.Context, c conn, p *store.WebhookInsertParams) (*store.Webhook, error) {
	types, err := json.Marshal(p.EventTypes)
	if err != nil {
		return nil, fmt.Errorf("encode webhook event types: %w", err)
	}
	w, err := scanWebhook(c.QueryRow(ctx, `INSERT INTO docket_webhooks (id, url, event_types, secret, created_at)
		VALUES ($1, $2, $3, $4, $5) RETURNING `+webhookColumns,
		p.ID, p.URL, string(types), p.Secret, dbTime(p.Now)))
	if err != nil {
		return nil, fmt.Errorf("insert webhook: %w", err)
	}
	return w, nil
}

// WebhookGet implements store.Store.
func (s *Store) WebhookGet(ctx context.Context, id uuid.UUID) (*store.Webhook, error) {
	return webhookGet(ctx, s.pool, id)
}

// webhookGet reads a subscription through c.
func webhookGet(ctx context.Context, c conn, id uuid.UUID) (*store.Webhook, error) {
	w, err := scanWebhook(c.QueryRow(ctx, `SELECT `+webhookColumns+` FROM docket_webhooks WHERE id = $1`, id))
	if err != nil {
		return nil, fmt.Errorf("get webhook %s: %w", id, notFound(err))
	}
	return w, nil
}

// WebhookList implements store.Store.
func (s *Store) WebhookList(ctx context.Context) ([]*store.Webhook, error) {
	rs, err := s.pool.Query(ctx, `SELECT `+webhookColumns+` FROM docket_webhooks ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	defer rs.Close()
	var out []*store.Webhook
	for rs.Next() {
		w, err := scanWebhook(rs)
		if err != nil {
			return nil, fmt.Errorf("list webhooks: %w", err)
		}
		out = append(out, w)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	return out, nil
}

// WebhookDelete implements store.Store. Deliveries go with it (ON DELETE
// CASCADE).
func (s *Store) WebhookDelete(ctx context.Context, id uuid.UUID) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM docket_webhooks WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("delete webhook %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete webhook %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// WebhookOutboxListPending implements store.Store through the partial
// index docket_outbox_webhooks_pending.
func (s *Store) WebhookOutboxListPending(ctx context.Context, p *store.WebhookOutboxListPendingParams) ([]*store.OutboxEvent, error) {
	rs, err := s.pool.Query(ctx, `
		SELECT id, event_type, data, created_at
		FROM docket_outbox
		WHERE webhooks_at IS NULL
		ORDER BY id
		LIMIT $1`, limitOrNull(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list outbox rows to fan out: %w", err)
	}
	defer rs.Close()
	var out []*store.OutboxEvent
	for rs.Next() {
		ev, err := scanOutbox(rs)
		if err != nil {
			return nil, fmt.Errorf("list outbox rows to fan out: %w", err)
		}
		out = append(out, ev)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list outbox rows to fan out: %w", err)
	}
	return out, nil
}

// webhookFanOutSQL inserts the deliveries given as parallel arrays, skipping
// those of webhooks deleted meanwhile and those that exist, then marks the
// outbox rows; one statement, so one transaction.
const webhookFanOutSQL = `
WITH ins AS (
	INSERT INTO docket_webhook_deliveries (id, webhook_id, event_id, event_type, outbox_id, event_index,
		payload, state, next_attempt_at, created_at, updated_at)
	SELECT d.id, d.webhook_id, d.event_id, d.event_type, d.outbox_id, d.event_index,
		d.payload::json, 'PENDING', $8, $8, $8
	FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::bigint[], $6::integer[], $7::text[])
		AS d(id, webhook_id, event_id, event_type, outbox_id, event_index, payload)
	WHERE EXISTS (SELECT 1 FROM docket_webhooks w WHERE w.id = d.webhook_id)
	ON CONFLICT (webhook_id, event_id) DO NOTHING
	RETURNING 1
), mark AS (
	UPDATE docket_outbox SET webhooks_at = $8
	WHERE id = ANY($9::bigint[]) AND webhooks_at IS NULL
)
SELECT count(*) FROM ins`

// WebhookFanOut implements store.Store.
func (s *Store) WebhookFanOut(ctx context.Context, p *store.WebhookFanOutParams) (int, error) {
	n := len(p.Deliveries)
	var (
		ids, hooks  = make([][16]byte, n), make([][16]byte, n)
		events      = make([]string, n)
		types       = make([]string, n)
		outboxIDs   = make([]int64, n)
		indexes     = make([]int32, n)
		payloads    = make([]string, n)
		fannedOutOf = p.OutboxIDs
	)
	for i, d := range p.Deliveries {
		ids[i], hooks[i] = d.ID, d.WebhookID
		events[i], types[i] = d.EventID, d.EventType
		outboxIDs[i], indexes[i] = d.OutboxID, int32(d.EventIndex)
		payloads[i] = string(d.Payload)
	}
	if fannedOutOf == nil {
		fannedOutOf = []int64{}
	}
	var inserted int
	err := s.pool.QueryRow(ctx, webhookFanOutSQL, ids, hooks, events, types, outboxIDs, indexes, payloads,
		dbTime(p.Now), fannedOutOf).Scan(&inserted)
	if err != nil {
		return 0, fmt.Errorf("fan out %d outbox rows to webhooks: %w", len(p.OutboxIDs), err)
	}
	return inserted, nil
}

const deliveryColumns = `id, webhook_id, event_id, event_type, outbox_id, event_index, payload, state,
	attempts, last_status_code, last_error, next_attempt_at, created_at, updated_at, last_attempt_at, finished_at`

func scanDelivery(row pgx.Row) (*store.WebhookDelivery, error) {
	var (
		d                         store.WebhookDelivery
		payload                   []byte
		state                     string
		lastAttempt, finished     *time.Time
		next, created, updated    time.Time
		index, attempts, lastCode int32
	)
	if err := row.Scan(&d.ID, &d.WebhookID, &d.EventID, &d.EventType, &d.OutboxID, &index, &payload, &state,
		&attempts, &lastCode, &d.LastError, &next, &created, &updated, &lastAttempt, &finished); err != nil {
		return nil, err
	}
	d.EventIndex, d.Attempts, d.LastStatusCode = int(index), int(attempts), int(lastCode)
	d.Payload = json.RawMessage(payload)
	d.State = store.WebhookDeliveryState(state)
	d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = next.UTC(), created.UTC(), updated.UTC()
	d.LastAttemptAt, d.FinishedAt = utcOrZero(lastAttempt), utcOrZero(finished)
	return &d, nil
}

func collectDeliveries(rs pgx.Rows) ([]*store.WebhookDelivery, error) {
	defer rs.Close()
	var out []*store.WebhookDelivery
	for rs.Next() {
		d, err := scanDelivery(rs)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rs.Err()
}

// webhookClaimSQL picks the due deliveries, at most $3 per webhook in event
// order, and locks them (skipping rows another claimer holds) before
// taking them.
const webhookClaimSQL = `
UPDATE docket_webhook_deliveries
SET attempts = attempts + 1, next_attempt_at = $5, updated_at = $1, claimed_by = $6
WHERE id = ANY(ARRAY(
	SELECT id FROM docket_webhook_deliveries
	WHERE id IN (
		SELECT id FROM (
			SELECT id, outbox_id, event_index,
				row_number() OVER (PARTITION BY webhook_id ORDER BY outbox_id, event_index) AS rank
			FROM docket_webhook_deliveries
			WHERE state = 'PENDING' AND next_attempt_at <= $1 AND NOT (webhook_id = ANY($4::uuid[]))
		) due
		WHERE rank <= $3
		ORDER BY outbox_id, event_index
		LIMIT $2)
	AND state = 'PENDING' AND next_attempt_at <= $1
	FOR UPDATE SKIP LOCKED))
RETURNING ` + deliveryColumns

// WebhookDeliveryClaim implements store.Store.
func (s *Store) WebhookDeliveryClaim(ctx context.Context, p *store.WebhookDeliveryClaimParams) ([]*store.WebhookDelivery, error) {
	exclude := make([][16]byte, len(p.Exclude))
	for i, id := range p.Exclude {
		exclude[i] = id
	}
	now := dbTime(p.Now)
	rs, err := s.pool.Query(ctx, webhookClaimSQL, now, p.Max, max(p.PerWebhook, 1), exclude, dbTime(p.LeaseUntil), p.NodeID)
	if err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: %w", err)
	}
	out, err := collectDeliveries(rs)
	if err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: %w", err)
	}
	// RETURNING gives no order.
	slices.SortFunc(out, func(a, b *store.WebhookDelivery) int {
		return cmp.Or(cmp.Compare(a.OutboxID, b.OutboxID), cmp.Compare(a.EventIndex, b.EventIndex))
	})
	return out, nil
}

// WebhookDeliveryFinish implements store.Store.
func (s *Store) WebhookDeliveryFinish(ctx context.Context, p *store.WebhookDeliveryFinishParams) (bool, error) {
	now := dbTime(p.Now)
	next, finished := dbTime(p.NextAttemptAt), &now
	if p.State == store.DeliveryPending {
		finished = nil
	} else {
		next = now
	}
	tag, err := s.pool.Exec(ctx, `UPDATE docket_webhook_deliveries
		SET state = $3, last_status_code = $4, last_error = $5, next_attempt_at = $6, finished_at = $7, updated_at = $8,
			last_attempt_at = $9, claimed_by = NULL
		WHERE id = $1 AND attempts = $2 AND state = 'PENDING'`,
		p.ID, p.Attempt, string(p.State), p.StatusCode, p.Error, next, finished, now, dbTime(p.AttemptedAtOrNow()))
	if err != nil {
		return false, fmt.Errorf("finish webhook delivery %s: %w", p.ID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// WebhookDeliveryRelease implements store.Store.
func (s *Store) WebhookDeliveryRelease(ctx context.Context, p *store.WebhookDeliveryReleaseParams) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE docket_webhook_deliveries
		SET attempts = attempts - 1, next_attempt_at = $3, updated_at = $4, claimed_by = NULL
		WHERE id = $1 AND attempts = $2 AND state = 'PENDING'`,
		p.ID, p.Attempt, dbTime(p.NextAttemptAt), dbTime(p.Now))
	if err != nil {
		return false, fmt.Errorf("release webhook delivery %s: %w", p.ID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// WebhookDeliveryReclaim implements store.Store. It reads every PENDING
// delivery (the partial index of due ones): once per term of the
// webhooks leadership.
func (s *Store) WebhookDeliveryReclaim(ctx context.Context, p *store.WebhookDeliveryReclaimParams) (int, error) {
	now := dbTime(p.Now)
	tag, err := s.pool.Exec(ctx, `UPDATE docket_webhook_deliveries
		SET next_attempt_at = $2, updated_at = $2, claimed_by = NULL
		WHERE state = 'PENDING' AND claimed_by IS NOT NULL AND claimed_by <> $1`, p.NodeID, now)
	if err != nil {
		return 0, fmt.Errorf("reclaim webhook deliveries: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// webhookSkipSQL counts a due attempt not made for the due deliveries of
// the webhooks $1, oldest event first, locking them as a claim does.
// $5[n] is the delay in microseconds after attempt n (1-based, as
// PostgreSQL arrays are); SET reads the row as it was. It ends an old
// claim of the row (expired, since the row is due), so that a new
// holder's reclaim does not bring it forward past the backoff set here.
const webhookSkipSQL = `
UPDATE docket_webhook_deliveries
SET attempts = attempts + 1, last_status_code = 0, last_error = $3, updated_at = $2, claimed_by = NULL,
	state = CASE WHEN attempts + 1 >= $4 THEN 'DEAD' ELSE 'PENDING' END,
	finished_at = CASE WHEN attempts + 1 >= $4 THEN $2 END,
	next_attempt_at = CASE WHEN attempts + 1 >= $4 THEN $2
		ELSE $2 + ($5::bigint[])[attempts + 1] * interval '1 microsecond' END
WHERE id = ANY(ARRAY(
	SELECT id FROM docket_webhook_deliveries
	WHERE state = 'PENDING' AND next_attempt_at <= $2 AND webhook_id = ANY($1::uuid[])
	ORDER BY outbox_id, event_index
	LIMIT $6
	FOR UPDATE SKIP LOCKED))
AND state = 'PENDING' AND next_attempt_at <= $2`

// WebhookDeliverySkip implements store.Store.
func (s *Store) WebhookDeliverySkip(ctx context.Context, p *store.WebhookDeliverySkipParams) (int, error) {
	if err := p.Check(); err != nil {
		return 0, err
	}
	hooks := make([][16]byte, len(p.WebhookIDs))
	for i, id := range p.WebhookIDs {
		hooks[i] = id
	}
	tag, err := s.pool.Exec(ctx, webhookSkipSQL, hooks, dbTime(p.Now), p.Error, p.MaxAttempts, p.DelayMicros(),
		limitOrNull(p.Max))
	if err != nil {
		return 0, fmt.Errorf("skip webhook deliveries: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// WebhookDeliveryHasten implements store.Store.
func (s *Store) WebhookDeliveryHasten(ctx context.Context, p *store.WebhookDeliveryHastenParams) (*store.WebhookDeliveryHastenResult, error) {
	var r store.WebhookDeliveryHastenResult
	err := s.pool.QueryRow(ctx, `WITH waiting AS (
			SELECT count(*) AS n FROM docket_webhook_deliveries
			WHERE webhook_id = $1 AND state = 'PENDING' AND next_attempt_at <= $2
				AND created_at < $3 AND (last_attempt_at IS NULL OR last_attempt_at < $3)
		), hastened AS (
			UPDATE docket_webhook_deliveries SET next_attempt_at = $2, updated_at = $2
			WHERE id = ANY(ARRAY(
				SELECT id FROM docket_webhook_deliveries
				WHERE webhook_id = $1 AND state = 'PENDING' AND next_attempt_at > $2
					AND created_at < $3 AND (last_attempt_at IS NULL OR last_attempt_at < $3)
					AND (SELECT n FROM waiting) = 0
				ORDER BY outbox_id, event_index
				LIMIT $4
				FOR UPDATE SKIP LOCKED))
			AND state = 'PENDING' AND next_attempt_at > $2
			RETURNING 1
		)
		SELECT (SELECT count(*) FROM hastened), (SELECT n FROM waiting)`,
		p.WebhookID, dbTime(p.Now), dbTime(p.Before), limitOrNull(p.Max)).Scan(&r.Hastened, &r.Waiting)
	if err != nil {
		return nil, fmt.Errorf("hasten deliveries of webhook %s: %w", p.WebhookID, err)
	}
	return &r, nil
}

// WebhookDeliveryList implements store.Store.
func (s *Store) WebhookDeliveryList(ctx context.Context, p *store.WebhookDeliveryListParams) ([]*store.WebhookDelivery, error) {
	rs, err := s.pool.Query(ctx, `SELECT `+deliveryColumns+` FROM docket_webhook_deliveries
		WHERE webhook_id = $1 AND ($2 = '' OR state = $2)
		ORDER BY outbox_id DESC, event_index DESC
		LIMIT $3`, p.WebhookID, string(p.State), limitOrNull(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list deliveries of webhook %s: %w", p.WebhookID, err)
	}
	out, err := collectDeliveries(rs)
	if err != nil {
		return nil, fmt.Errorf("list deliveries of webhook %s: %w", p.WebhookID, err)
	}
	return out, nil
}

// WebhookDeliveryRedeliver implements store.Store.
func (s *Store) WebhookDeliveryRedeliver(ctx context.Context, p *store.WebhookDeliveryRedeliverParams) (*store.WebhookDelivery, error) {
	now := dbTime(p.Now)
	d, err := scanDelivery(s.pool.QueryRow(ctx, `
		WITH upd AS (
			UPDATE docket_webhook_deliveries
			SET state = 'PENDING', attempts = 0, next_attempt_at = $3, finished_at = NULL, updated_at = $3
			WHERE id = $1 AND webhook_id = $2 AND state IN ('DELIVERED', 'DEAD')
			RETURNING `+deliveryColumns+`
		)
		SELECT * FROM upd
		UNION ALL
		SELECT `+deliveryColumns+` FROM docket_webhook_deliveries
		WHERE id = $1 AND webhook_id = $2 AND NOT EXISTS (SELECT 1 FROM upd)`,
		p.ID, p.WebhookID, now))
	if err != nil {
		return nil, fmt.Errorf("redeliver webhook delivery %s: %w", p.ID, notFound(err))
	}
	return d, nil
}

// WebhookDeliveryDeleteFinished implements store.Store.
func (s *Store) WebhookDeliveryDeleteFinished(ctx context.Context, p *store.WebhookDeliveryDeleteFinishedParams) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM docket_webhook_deliveries WHERE id = ANY(ARRAY(
		SELECT id FROM docket_webhook_deliveries
		WHERE finished_at < $1 AND state IN ('DELIVERED', 'DEAD')
		LIMIT $2))`, dbTime(p.FinishedBefore), limitOrNull(p.Max))
	if err != nil {
		return 0, fmt.Errorf("delete finished webhook deliveries: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
