package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/sony/gobreaker/v2"

	"github.com/docket-run/docket/internal/backoff"
	"github.com/docket-run/docket/internal/store"
)

// Delivery request headers.
const (
	HeaderEventID    = "X-Docket-Event-Id"
	HeaderEventType  = "X-Docket-Event-Type"
	HeaderTimestamp  = "X-Docket-Timestamp" // unix seconds
	HeaderSignature  = "X-Docket-Signature" // sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">
	HeaderDeliveryID = "X-Docket-Delivery-Id"
	HeaderAttempt    = "X-Docket-Attempt"
)

// userAgent is sent with every delivery.
const userAgent = "docket-webhooks/1"

// errorBodyMax bounds how much of a failed answer is kept in last_error.
const errorBodyMax = 256

// runDeliverer sends due deliveries until ctx ends: every PollInterval, or
// sooner when woken (new deliveries, a redelivery, an endpoint done), it
// claims deliveries of the endpoints that are neither busy nor behind an
// open breaker, and sends each endpoint's batch in event order in its own
// goroutine, at most Concurrency at once.
func (s *Service) runDeliverer(ctx context.Context) {
	d := &deliverer{s: s, busy: map[uuid.UUID]bool{}}
	defer d.wg.Wait()
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		d.claim(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
		}
	}
}

// deliverer is the state of one runDeliverer.
type deliverer struct {
	s  *Service
	wg sync.WaitGroup

	mu   sync.Mutex
	busy map[uuid.UUID]bool // subscriptions with a batch in flight
}

func (d *deliverer) claim(ctx context.Context) {
	s := d.s
	hooks, err := s.store.WebhookList(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("list webhooks failed", attrError, err)
		}
		return
	}
	byID := make(map[uuid.UUID]*store.Webhook, len(hooks))
	d.mu.Lock()
	exclude := make([]uuid.UUID, 0, len(d.busy))
	for id := range d.busy {
		exclude = append(exclude, id)
	}
	free := s.cfg.Concurrency - len(d.busy)
	d.mu.Unlock()
	var open []uuid.UUID
	for _, w := range hooks {
		byID[w.ID] = w
		if s.breakers.open(w.URL) {
			open = append(open, w.ID)
		}
	}
	s.breakers.retain(hooks)
	now := s.cfg.Now()
	if len(open) > 0 {
		d.skip(ctx, open, now)
		exclude = append(exclude, open...)
	}
	if free <= 0 || len(hooks) == 0 {
		// Nothing can be claimed: nothing is brought forward either,
		// which the breaker opening again could charge an attempt.
		return
	}
	d.hasten(ctx, hooks, exclude, now)
	claimed, err := s.store.WebhookDeliveryClaim(ctx, &store.WebhookDeliveryClaimParams{
		Now: now, Max: free * PerWebhookBatch, PerWebhook: PerWebhookBatch, Exclude: exclude,
		// Long enough for the batch to be sent one by one, each within
		// the timeout; another claimer may retry it after that.
		LeaseUntil: now.Add(time.Duration(PerWebhookBatch+1) * s.cfg.Timeout),
		NodeID:     s.cfg.NodeID,
	})
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("claim webhook deliveries failed", attrError, err)
		}
		return
	}
	batches := map[uuid.UUID][]*store.WebhookDelivery{}
	var order []uuid.UUID
	for _, dl := range claimed {
		if batches[dl.WebhookID] == nil {
			order = append(order, dl.WebhookID)
		}
		batches[dl.WebhookID] = append(batches[dl.WebhookID], dl)
	}
	for _, id := range order {
		w, batch := byID[id], batches[id]
		if w == nil { // created after the list: the next claim sends it
			d.releaseAll(ctx, batch, now)
			continue
		}
		d.mu.Lock()
		d.busy[id] = true
		d.mu.Unlock()
		d.wg.Go(func() {
			defer func() {
				d.mu.Lock()
				delete(d.busy, id)
				d.mu.Unlock()
				s.notify()
			}()
			d.send(ctx, w, batch)
		})
	}
}

// skipMessage is the last error of an attempt not made.
const skipMessage = "not sent: the endpoint's circuit breaker is open"

// skipBatch is how many deliveries one skip statement changes.
const skipBatch = 1000

// skip counts the due attempts of the deliveries of ids, whose endpoints'
// breakers are open, as failed without sending them: each keeps to the
// retry schedule (its next attempt after the backoff, DEAD after the
// last), however many wait behind the breaker. The delays are drawn once
// per call: the deliveries skipped together at one attempt number stay
// due together, in event order.
func (d *deliverer) skip(ctx context.Context, ids []uuid.UUID, now time.Time) {
	s := d.s
	policy := backoff.Policy{Base: s.cfg.BackoffBase, Max: s.cfg.BackoffMax}
	delays := make([]time.Duration, s.cfg.MaxAttempts-1)
	for i := range delays {
		delays[i] = policy.Delay(i + 1)
	}
	for ctx.Err() == nil {
		n, err := s.store.WebhookDeliverySkip(ctx, &store.WebhookDeliverySkipParams{
			WebhookIDs: ids, Now: now, Error: skipMessage, MaxAttempts: s.cfg.MaxAttempts, Delays: delays, Max: skipBatch,
		})
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("skip webhook deliveries failed", attrError, err)
			}
			return
		}
		if n > 0 {
			s.log.Debug("webhook deliveries not sent: circuit breaker open", attrCount, n)
		}
		if n < skipBatch {
			return
		}
	}
}

// hasten drains the backlogs of the endpoints whose breaker closed again
// (the trial request succeeded: the endpoint recovered). The deliveries of
// their subscriptions waiting since before the recovery (held back by the
// open breaker, or failed while the endpoint was down) would each wait for
// its own next attempt, up to BackoffMax; instead a batch of each
// subscription not busy (excluded), oldest event first, is made due now,
// for the claim that follows to send in event order. One batch at a time:
// the caller hastens only when it can claim, and a subscription's next
// batch is brought forward only once the previous one has been claimed
// (none of its backlog is due), so if the breaker opens again, at most one
// batch per subscription had been brought forward without being sent.
// An endpoint is drained when none of its subscriptions is busy and none
// has a delivery left to bring forward or waiting to be claimed, or when
// its breaker is no longer closed. A delivery attempted since the recovery
// keeps its own schedule, so one that keeps failing is not tried again
// before its time.
func (d *deliverer) hasten(ctx context.Context, hooks []*store.Webhook, exclude []uuid.UUID, now time.Time) {
	s := d.s
	recovered := s.breakers.recoveredURLs()
	if len(recovered) == 0 {
		return
	}
	skip := make(map[uuid.UUID]bool, len(exclude))
	for _, id := range exclude {
		skip[id] = true
	}
	for url, since := range recovered {
		if !s.breakers.closed(url) {
			s.breakers.drained(url, since)
			continue
		}
		left := false
		for _, w := range hooks {
			if w.URL != url {
				continue
			}
			if skip[w.ID] {
				left = true // its batch in flight may be followed by more
				continue
			}
			r, err := s.store.WebhookDeliveryHasten(ctx, &store.WebhookDeliveryHastenParams{
				WebhookID: w.ID, Before: since, Now: now, Max: PerWebhookBatch,
			})
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("hasten webhook deliveries failed", attrWebhook, w.ID.String(), attrError, err)
				}
				left = true
				continue
			}
			if r.Hastened > 0 || r.Waiting > 0 {
				left = true // the claim that follows takes this batch; then the next
			}
			if r.Hastened > 0 {
				s.log.Debug("webhook deliveries brought forward: endpoint recovered", attrWebhook, w.ID.String(), attrCount, r.Hastened)
			}
		}
		if !left {
			s.breakers.drained(url, since)
		}
	}
}

// send delivers one subscription's batch in event order.
func (d *deliverer) send(ctx context.Context, w *store.Webhook, batch []*store.WebhookDelivery) {
	s := d.s
	for i, dl := range batch {
		if ctx.Err() != nil {
			d.releaseAll(ctx, batch[i:], s.cfg.Now())
			return
		}
		cb := s.breakers.get(w.URL) // marks it used
		sent := s.cfg.Now()
		res, err := cb.Execute(func() (result, error) {
			r := s.post(ctx, w, dl)
			return r, r.err
		})
		if errors.Is(err, gobreaker.ErrOpenState) {
			// The breaker opened (on this batch's failure or another's):
			// the attempts due now count, unsent, this batch's and those
			// of the subscription's other due deliveries.
			now := s.cfg.Now()
			d.releaseAll(ctx, batch[i:], now)
			d.skip(ctx, []uuid.UUID{w.ID}, now)
			return
		}
		if errors.Is(err, gobreaker.ErrTooManyRequests) || (err != nil && ctx.Err() != nil) {
			// Not attempted, another request tries the endpoint (or cut
			// short by shutdown): give the attempts back, due now.
			d.releaseAll(ctx, batch[i:], s.cfg.Now())
			return
		}
		if !d.record(ctx, w, dl, res, sent) {
			// The delivery is gone (its subscription was deleted) or
			// was taken over: this claim sends no more of the batch.
			d.releaseAll(ctx, batch[i+1:], s.cfg.Now())
			return
		}
	}
}

// result is the outcome of one POST.
type result struct {
	status int
	err    error // nil for a 2xx
}

// post sends one delivery and reads (a little of) the answer.
func (s *Service) post(ctx context.Context, w *store.Webhook, dl *store.WebhookDelivery) result {
	ts := strconv.FormatInt(s.cfg.Now().Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(dl.Payload))
	if err != nil {
		return result{err: fmt.Errorf("build request: %w", redactError(err, w.URL))}
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", userAgent)
	h.Set(HeaderEventID, dl.EventID)
	h.Set(HeaderEventType, dl.EventType)
	h.Set(HeaderTimestamp, ts)
	h.Set(HeaderSignature, Sign(w.Secret, ts, dl.Payload))
	h.Set(HeaderDeliveryID, dl.ID.String())
	h.Set(HeaderAttempt, strconv.Itoa(dl.Attempts))
	resp, err := s.client.Do(req)
	if err != nil {
		// Recorded as lastError and logged: the URL it names as shown.
		return result{err: redactError(err, w.URL)}
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyMax))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // lets the connection be reused
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := "HTTP " + resp.Status
		if len(bytes.TrimSpace(snippet)) > 0 {
			// As the database stores it: a NUL or bytes that are not
			// UTF-8 in a receiver's answer would fail the attempt's record.
			msg += ": " + store.CleanText(string(bytes.TrimSpace(snippet)))
		}
		return result{status: resp.StatusCode, err: errors.New(msg)}
	}
	return result{status: resp.StatusCode}
}

// record stores the outcome of an attempt sent at sent: DELIVERED on a
// 2xx; otherwise PENDING after a backoff, or DEAD after the last attempt.
// It returns false when the delivery was no longer this claim's to record
// (deleted with its subscription, or claimed again after this claim's
// lease).
func (d *deliverer) record(ctx context.Context, w *store.Webhook, dl *store.WebhookDelivery, r result, sent time.Time) bool {
	s := d.s
	now := s.cfg.Now()
	p := &store.WebhookDeliveryFinishParams{ID: dl.ID, Attempt: dl.Attempts, StatusCode: r.status, AttemptedAt: sent, Now: now}
	switch {
	case r.err == nil:
		p.State = store.DeliveryDelivered
	case dl.Attempts >= s.cfg.MaxAttempts:
		p.State, p.Error = store.DeliveryDead, r.err.Error()
	default:
		p.State, p.Error = store.DeliveryPending, r.err.Error()
		policy := backoff.Policy{Base: s.cfg.BackoffBase, Max: s.cfg.BackoffMax}
		p.NextAttemptAt = now.Add(policy.Delay(dl.Attempts))
	}
	// Recorded even while shutting down: the attempt was made.
	ok, err := s.store.WebhookDeliveryFinish(context.WithoutCancel(ctx), p)
	switch {
	case err != nil:
		s.log.Warn("record webhook delivery failed", attrDelivery, dl.ID.String(), attrError, err)
	case !ok:
		s.log.Info("webhook delivery changed while it was sent; outcome not recorded",
			attrDelivery, dl.ID.String(), attrEventID, dl.EventID)
		return false
	case p.State == store.DeliveryDead:
		s.log.Warn("webhook delivery is dead", attrWebhook, w.ID.String(), attrDelivery, dl.ID.String(),
			attrEventID, dl.EventID, "attempts", dl.Attempts, attrError, p.Error)
	case p.State == store.DeliveryPending:
		s.log.Info("webhook delivery failed; will retry", attrWebhook, w.ID.String(), attrDelivery, dl.ID.String(),
			attrEventID, dl.EventID, "attempt", dl.Attempts, "next_attempt_at", p.NextAttemptAt, attrError, p.Error)
	}
	return true
}

// releaseAll gives back claimed attempts that were not made.
func (d *deliverer) releaseAll(ctx context.Context, ds []*store.WebhookDelivery, due time.Time) {
	ctx = context.WithoutCancel(ctx)
	for _, dl := range ds {
		if _, err := d.s.store.WebhookDeliveryRelease(ctx, &store.WebhookDeliveryReleaseParams{
			ID: dl.ID, Attempt: dl.Attempts, NextAttemptAt: due, Now: d.s.cfg.Now(),
		}); err != nil {
			d.s.log.Warn("release webhook delivery failed", attrDelivery, dl.ID.String(), attrError, err)
		}
	}
}

// breakerIdleMin is the least time a breaker in its initial state is
// kept after its last use.
const breakerIdleMin = 10 * time.Minute

// breakers holds one circuit breaker per endpoint URL, for the URLs the
// subscriptions use: retain evicts the others.
type breakers struct {
	cfg  Config
	log  *slog.Logger
	idle time.Duration    // an unused breaker in its initial state is evicted after this
	now  func() time.Time // real time, as gobreaker's; tests replace it

	mu sync.Mutex
	m  map[string]*breakerEntry

	// recovered holds the URLs whose breaker closed again, and when (by
	// cfg.Now), until their backlog is drained. Its own lock: the breakers'
	// state changes are told while mu may be held (retain).
	recoveredMu sync.Mutex
	recovered   map[string]time.Time
}

// breakerEntry is one endpoint's breaker and when it was last asked for.
type breakerEntry struct {
	cb   *gobreaker.CircuitBreaker[result]
	used time.Time
}

func newBreakers(cfg Config, log *slog.Logger) *breakers {
	return &breakers{
		cfg: cfg, log: log, now: time.Now, m: map[string]*breakerEntry{}, recovered: map[string]time.Time{},
		// Longer than a request, so a breaker is not evicted under one.
		idle: max(breakerIdleMin, 2*cfg.Timeout),
	}
}

func (b *breakers) get(url string) *gobreaker.CircuitBreaker[result] {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.m[url]
	if e == nil {
		failures := uint32(b.cfg.BreakerFailures)
		e = &breakerEntry{cb: gobreaker.NewCircuitBreaker[result](gobreaker.Settings{
			Name:        RedactURL(url), // logged and told to OnBreakerChange
			MaxRequests: 1,
			Timeout:     b.cfg.BreakerOpen,
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
			// A request cut short by shutdown says nothing of the endpoint.
			IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
			OnStateChange: func(name string, from, to gobreaker.State) {
				b.log.Info("webhook endpoint circuit breaker "+to.String(), attrEndpoint, name, "from", from.String())
				if from == gobreaker.StateHalfOpen && to == gobreaker.StateClosed {
					b.recoveredMu.Lock()
					b.recovered[url] = b.cfg.Now()
					b.recoveredMu.Unlock()
				}
				if b.cfg.OnBreakerChange != nil {
					b.cfg.OnBreakerChange(name, from.String(), to.String())
				}
			},
		})}
		b.m[url] = e
	}
	e.used = b.now()
	return e.cb
}

// open reports whether url's breaker is open (no attempt may be made).
func (b *breakers) open(url string) bool {
	b.mu.Lock()
	e := b.m[url]
	b.mu.Unlock()
	return e != nil && e.cb.State() == gobreaker.StateOpen
}

// closed reports whether url's breaker is closed (requests flow).
func (b *breakers) closed(url string) bool {
	b.mu.Lock()
	e := b.m[url]
	b.mu.Unlock()
	return e != nil && e.cb.State() == gobreaker.StateClosed
}

// recoveredURLs returns the URLs whose breaker closed again and whose
// backlog is not drained yet, with when each closed.
func (b *breakers) recoveredURLs() map[string]time.Time {
	b.recoveredMu.Lock()
	defer b.recoveredMu.Unlock()
	if len(b.recovered) == 0 {
		return nil
	}
	out := make(map[string]time.Time, len(b.recovered))
	for url, since := range b.recovered {
		out[url] = since
	}
	return out
}

// drained forgets url's recovery of since (not a later one).
func (b *breakers) drained(url string, since time.Time) {
	b.recoveredMu.Lock()
	defer b.recoveredMu.Unlock()
	if t, ok := b.recovered[url]; ok && t.Equal(since) {
		delete(b.recovered, url)
	}
}

// retain evicts the breakers of the URLs no subscription of hooks uses
// (whatever their state: nothing is sent there any more), and those not
// used for b.idle that are in their initial state (closed, no failure
// counted), which a new breaker would be too. So the map holds at most one
// breaker per URL subscribed to, and in the long run only those of the
// endpoints in use or failing.
func (b *breakers) retain(hooks []*store.Webhook) {
	subscribed := make(map[string]bool, len(hooks))
	for _, w := range hooks {
		subscribed[w.URL] = true
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for url, e := range b.m {
		fresh := e.cb.State() == gobreaker.StateClosed && e.cb.Counts().ConsecutiveFailures == 0
		if !subscribed[url] || (fresh && now.Sub(e.used) >= b.idle) {
			delete(b.m, url)
		}
	}
}

// len is how many breakers are kept.
func (b *breakers) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}
