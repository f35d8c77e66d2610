package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/docket-run/docket/internal/store"
)

// OutboxListUnpublished implements store.Store: through the partial index
// of unpublished rows.
func (s *Store) OutboxListUnpublished(ctx context.Context, p *store.OutboxListUnpublishedParams) ([]*store.OutboxEvent, error) {
	out, err := s.queryOutbox(ctx, `
		SELECT id, event_type, data, created_at FROM docket_outbox INDEXED BY docket_outbox_unpublished
		WHERE published_at IS NULL ORDER BY id LIMIT ?`, limit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list unpublished outbox rows: %w", err)
	}
	return out, nil
}

// OutboxCountUnpublished implements store.Store through the partial index
// of unpublished rows.
func (s *Store) OutboxCountUnpublished(ctx context.Context) (int, error) {
	var n int
	err := s.reader.QueryRowContext(ctx, `SELECT count(*) FROM docket_outbox INDEXED BY docket_outbox_unpublished
		WHERE published_at IS NULL`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count unpublished outbox rows: %w", err)
	}
	return n, nil
}

// markPublishedSQL: ?1 Now, ?2 the number before the first, ?3 a JSON
// array of ids; each row's number is ?2 + 1 + its index in ?3. With no
// webhook subscription the rows are marked fanned out too
// (store.OutboxStore.OutboxMarkPublished).
//
// The ids are joined (UPDATE … FROM), not looked up per row: a correlated
// json_each per updated row made a round of n rows cost n² steps, inside
// the write lock, and the relay's rounds grow to 2,000 rows in a backlog.
const markPublishedSQL = `UPDATE docket_outbox
SET published_at = ?1,
    publish_seq = ?2 + 1 + u.key,
    webhooks_at = coalesce(webhooks_at, CASE WHEN NOT EXISTS (SELECT 1 FROM docket_webhooks) THEN ?1 END)
FROM json_each(?3) AS u
WHERE docket_outbox.id = u.value AND docket_outbox.published_at IS NULL`

// OutboxMarkPublished implements store.Store, in one write transaction
// (which SQLite serialises, so numbers are given in commit order).
func (s *Store) OutboxMarkPublished(ctx context.Context, p *store.OutboxMarkPublishedParams) (int, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	ids, err := json.Marshal(p.IDs)
	if err != nil {
		return 0, fmt.Errorf("encode outbox ids: %w", err)
	}
	var n int64
	err = s.write(ctx, func(tx *sql.Tx) error {
		var base int64
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(publish_seq), 0) FROM docket_outbox`).Scan(&base); err != nil {
			return fmt.Errorf("read last publish sequence: %w", err)
		}
		res, err := tx.ExecContext(ctx, markPublishedSQL, micros(p.Now), base, string(ids))
		if err != nil {
			return fmt.Errorf("mark %d outbox rows published: %w", len(p.IDs), err)
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	if n > 0 {
		s.hub.Publish(store.TopicOutboxPublished, "")
	}
	return int(n), nil
}

const publishedColumns = `id, event_type, data, created_at, publish_seq, published_at`

func scanPublished(sc interface{ Scan(...any) error }) (*store.PublishedEvent, error) {
	var (
		e                      store.PublishedEvent
		data                   []byte
		createdAt, publishedAt int64
	)
	if err := sc.Scan(&e.ID, &e.Type, &data, &createdAt, &e.Seq, &publishedAt); err != nil {
		return nil, err
	}
	e.Data = json.RawMessage(data)
	e.CreatedAt = fromMicros(createdAt)
	e.PublishedAt = fromMicros(publishedAt)
	return &e, nil
}

// OutboxGetPublished implements store.Store.
func (s *Store) OutboxGetPublished(ctx context.Context, id int64) (*store.PublishedEvent, error) {
	e, err := scanPublished(s.reader.QueryRowContext(ctx, `
		SELECT `+publishedColumns+` FROM docket_outbox WHERE id = ? AND publish_seq IS NOT NULL`, id))
	if err != nil {
		return nil, fmt.Errorf("get published outbox row %d: %w", id, notFound(err))
	}
	return e, nil
}

// OutboxLastSeq implements store.Store.
func (s *Store) OutboxLastSeq(ctx context.Context) (int64, error) {
	var seq int64
	if err := s.reader.QueryRowContext(ctx, `SELECT coalesce(max(publish_seq), 0) FROM docket_outbox`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("read last publish sequence: %w", err)
	}
	return seq, nil
}

// OutboxListPublished implements store.Store. The last sequence is read
// first: writes are serialised, so every row numbered up to it has
// committed.
func (s *Store) OutboxListPublished(ctx context.Context, p *store.OutboxListPublishedParams) ([]*store.PublishedEvent, int64, error) {
	last, err := s.OutboxLastSeq(ctx)
	if err != nil {
		return nil, 0, err
	}
	window := p.Window
	if window <= 0 {
		window = store.OutboxWindowDefault
	}
	through := min(last, p.AfterSeq+window)
	if through <= p.AfterSeq {
		return nil, p.AfterSeq, nil
	}
	types, err := json.Marshal(p.Types)
	if err != nil {
		return nil, 0, fmt.Errorf("encode event types: %w", err)
	}
	rows, err := s.reader.QueryContext(ctx, `
		SELECT `+publishedColumns+` FROM docket_outbox INDEXED BY docket_outbox_publish_seq
		WHERE publish_seq > ?1 AND publish_seq <= ?2
		  AND (?3 = 'null' OR ?3 = '[]' OR event_type IN (SELECT value FROM json_each(?3)))
		  AND (?4 = '' OR instr(data, ?4) > 0)
		ORDER BY publish_seq
		LIMIT ?5`, p.AfterSeq, through, string(types), p.Contains, limit(p.Limit))
	if err != nil {
		return nil, 0, fmt.Errorf("list published outbox rows after %d: %w", p.AfterSeq, err)
	}
	var out []*store.PublishedEvent
	for rows.Next() {
		e, err := scanPublished(rows)
		if err != nil {
			_ = rows.Close()
			return nil, 0, fmt.Errorf("scan outbox row: %w", err)
		}
		out = append(out, e)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, 0, fmt.Errorf("list published outbox rows after %d: %w", p.AfterSeq, err)
	}
	if p.Limit > 0 && len(out) == p.Limit {
		through = out[len(out)-1].Seq
	}
	return out, through, nil
}

// OutboxDeletePublished implements store.Store: oldest first along the
// publish_seq index. The newest published row is kept, so numbering goes on
// after it and a reader waiting past it misses nothing; so is a row whose
// webhook deliveries are not made yet (webhooks_at, migration 0005).
func (s *Store) OutboxDeletePublished(ctx context.Context, p *store.OutboxDeletePublishedParams) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM docket_outbox WHERE id IN (
			SELECT id FROM docket_outbox INDEXED BY docket_outbox_publish_seq
			WHERE publish_seq IS NOT NULL AND published_at < ? AND webhooks_at IS NOT NULL
			  AND publish_seq < (SELECT max(publish_seq) FROM docket_outbox)
			ORDER BY publish_seq LIMIT ?)`, micros(p.PublishedBefore), limit(p.Max))
		if err != nil {
			return fmt.Errorf("delete published outbox rows: %w", err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// OutboxDeleteOld implements store.Store: the heads of the partial indexes
// of unpublished rows and of rows not fanned out, a bounded read however
// many young rows wait behind them.
func (s *Store) OutboxDeleteOld(ctx context.Context, p *store.OutboxDeleteOldParams) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM docket_outbox WHERE id IN (
			SELECT id FROM (
				SELECT * FROM (SELECT id, created_at, publish_seq FROM docket_outbox INDEXED BY docket_outbox_unpublished
					WHERE published_at IS NULL ORDER BY id LIMIT ?2)
				UNION
				SELECT * FROM (SELECT id, created_at, publish_seq FROM docket_outbox INDEXED BY docket_outbox_webhooks_pending
					WHERE webhooks_at IS NULL ORDER BY id LIMIT ?2)
			)
			WHERE created_at < ?1
			  AND (publish_seq IS NULL OR publish_seq < (SELECT max(publish_seq) FROM docket_outbox))
			ORDER BY id LIMIT ?2)`, micros(p.CreatedBefore), limit(p.Max))
		if err != nil {
			return fmt.Errorf("delete outbox rows created before %s: %w", p.CreatedBefore.Format(time.RFC3339), err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}
