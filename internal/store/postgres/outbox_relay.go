package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/docket-run/docket/internal/store"
)

// channelOutboxPublished is the NOTIFY channel of store.TopicOutboxPublished.
const channelOutboxPublished = "docket_outbox_published"

// OutboxListUnpublished implements store.Store: through the partial index
// of unpublished rows.
func (s *Store) OutboxListUnpublished(ctx context.Context, p *store.OutboxListUnpublishedParams) ([]*store.OutboxEvent, error) {
	rs, err := s.pool.Query(ctx, `
		SELECT id, event_type, data, created_at
		FROM docket_outbox
		WHERE published_at IS NULL
		ORDER BY id
		LIMIT $1`, limitOrNull(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list unpublished outbox rows: %w", err)
	}
	defer rs.Close()
	var out []*store.OutboxEvent
	for rs.Next() {
		ev, err := scanOutbox(rs)
		if err != nil {
			return nil, fmt.Errorf("list unpublished outbox rows: %w", err)
		}
		out = append(out, ev)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list unpublished outbox rows: %w", err)
	}
	return out, nil
}

// OutboxCountUnpublished implements store.Store through the partial index
// of unpublished rows.
func (s *Store) OutboxCountUnpublished(ctx context.Context) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM docket_outbox WHERE published_at IS NULL`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count unpublished outbox rows: %w", err)
	}
	return n, nil
}

// markPublishedSQL numbers the rows $1 after the highest number so far, in
// the order of $1, and NOTIFYs on commit when it marked any. $2 is Now.
// When no webhook subscription exists it marks the rows fanned out too
// (store.OutboxStore.OutboxMarkPublished): what the dispatcher would do
// with them, in the same new row version. Each mark is a non-HOT update
// (both columns are in partial indexes' predicates): a new tuple and its
// entries in the primary key and the publish_seq index, and the first
// mark an entry in docket_outbox_webhooks_pending as well; one update
// instead of two is a tuple and three index entries less per event.
const markPublishedSQL = `
WITH base AS (
	SELECT coalesce(max(publish_seq), 0) AS seq,
		CASE WHEN NOT EXISTS (SELECT 1 FROM docket_webhooks) THEN $2::timestamptz END AS fanned
	FROM docket_outbox
),
marked AS (
	UPDATE docket_outbox o
	SET published_at = $2, publish_seq = base.seq + u.ord, webhooks_at = coalesce(o.webhooks_at, base.fanned)
	FROM unnest($1::bigint[]) WITH ORDINALITY AS u(id, ord), base
	WHERE o.id = u.id AND o.published_at IS NULL
	RETURNING o.id
),
notify AS (
	SELECT pg_notify('` + channelOutboxPublished + `', '') FROM (SELECT count(*) AS n FROM marked) m WHERE m.n > 0
)
SELECT (SELECT count(*) FROM marked), (SELECT count(*) FROM notify)`

// OutboxMarkPublished implements store.Store. A relay overlapping this one
// (at a change of leader) that numbers rows at the same time makes one of
// the two statements fail on the unique index of publish_seq; nothing is
// marked by it and its caller retries.
func (s *Store) OutboxMarkPublished(ctx context.Context, p *store.OutboxMarkPublishedParams) (int, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	var n, notified int
	if err := s.pool.QueryRow(ctx, markPublishedSQL, p.IDs, dbTime(p.Now)).Scan(&n, &notified); err != nil {
		return 0, fmt.Errorf("mark %d outbox rows published: %w", len(p.IDs), err)
	}
	if n > 0 {
		s.hub.Publish(store.TopicOutboxPublished, "")
	}
	return n, nil
}

const publishedColumns = `id, event_type, data, created_at, publish_seq, published_at`

func scanPublished(r rowScanner) (*store.PublishedEvent, error) {
	var (
		ev   store.PublishedEvent
		data []byte
	)
	if err := r.Scan(&ev.ID, &ev.Type, &data, &ev.CreatedAt, &ev.Seq, &ev.PublishedAt); err != nil {
		return nil, err
	}
	ev.Data = data
	ev.CreatedAt = ev.CreatedAt.UTC()
	ev.PublishedAt = ev.PublishedAt.UTC()
	return &ev, nil
}

// OutboxGetPublished implements store.Store.
func (s *Store) OutboxGetPublished(ctx context.Context, id int64) (*store.PublishedEvent, error) {
	ev, err := scanPublished(s.pool.QueryRow(ctx, `
		SELECT `+publishedColumns+` FROM docket_outbox WHERE id = $1 AND publish_seq IS NOT NULL`, id))
	if err != nil {
		return nil, fmt.Errorf("get published outbox row %d: %w", id, notFound(err))
	}
	return ev, nil
}

// OutboxLastSeq implements store.Store (a backward step of the publish_seq
// index).
func (s *Store) OutboxLastSeq(ctx context.Context) (int64, error) {
	var seq int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(publish_seq), 0) FROM docket_outbox`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("read last publish sequence: %w", err)
	}
	return seq, nil
}

// OutboxListPublished implements store.Store. The last sequence is read
// first: every row numbered up to it has committed (numbers are given in
// commit order), so rows up to it are complete.
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
	var types []string
	if len(p.Types) > 0 {
		types = p.Types
	}
	rs, err := s.pool.Query(ctx, `
		SELECT `+publishedColumns+` FROM docket_outbox
		WHERE publish_seq > $1 AND publish_seq <= $2
		  AND ($3::text[] IS NULL OR event_type = ANY($3))
		  AND ($4 = '' OR strpos(data::text, $4) > 0)
		ORDER BY publish_seq
		LIMIT $5`, p.AfterSeq, through, types, p.Contains, limitOrNull(p.Limit))
	if err != nil {
		return nil, 0, fmt.Errorf("list published outbox rows after %d: %w", p.AfterSeq, err)
	}
	defer rs.Close()
	var out []*store.PublishedEvent
	for rs.Next() {
		ev, err := scanPublished(rs)
		if err != nil {
			return nil, 0, fmt.Errorf("list published outbox rows after %d: %w", p.AfterSeq, err)
		}
		out = append(out, ev)
	}
	if err := rs.Err(); err != nil {
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
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM docket_outbox
		WHERE id = ANY(ARRAY(
			SELECT id FROM docket_outbox
			WHERE publish_seq IS NOT NULL AND published_at < $1 AND webhooks_at IS NOT NULL
			  AND publish_seq < (SELECT max(publish_seq) FROM docket_outbox)
			ORDER BY publish_seq
			LIMIT $2))`, dbTime(p.PublishedBefore), limitOrNull(p.Max))
	if err != nil {
		return 0, fmt.Errorf("delete published outbox rows: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// OutboxDeleteOld implements store.Store: the heads of the partial indexes
// of unpublished rows and of rows not fanned out, a bounded read however
// many young rows wait behind them.
func (s *Store) OutboxDeleteOld(ctx context.Context, p *store.OutboxDeleteOldParams) (int, error) {
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM docket_outbox
		WHERE id = ANY(ARRAY(
			SELECT id FROM (
				(SELECT id, created_at, publish_seq FROM docket_outbox
				 WHERE published_at IS NULL ORDER BY id LIMIT $2)
				UNION
				(SELECT id, created_at, publish_seq FROM docket_outbox
				 WHERE webhooks_at IS NULL ORDER BY id LIMIT $2)
			) head
			WHERE created_at < $1
			  AND (publish_seq IS NULL OR publish_seq < (SELECT max(publish_seq) FROM docket_outbox))
			ORDER BY id
			LIMIT $2))`, dbTime(p.CreatedBefore), limitOrNull(p.Max))
	if err != nil {
		return 0, fmt.Errorf("delete outbox rows created before %s: %w", p.CreatedBefore.Format(time.RFC3339), err)
	}
	return int(tag.RowsAffected()), nil
}
