package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/docket-run/docket/internal/backoff"
	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
)

// Defaults of ConsumerConfig.
const (
	MaxDeliveriesDefault     = 5
	AckWaitDefault           = 30 * time.Second
	NakBackoffBaseDefault    = time.Second
	NakBackoffMaxDefault     = time.Minute
	FetchBatchDefault        = 16
	RetryPollIntervalDefault = time.Second
)

// Log attribute keys of consumers (attrService and attrError are shared
// with the relay).
const (
	attrConsumer   = "consumer"
	attrEventID    = "event_id"
	attrDeliveries = "deliveries"
)

// Handler is a durable consumer's effect for one event. It runs inside the
// database transaction that records the event in the consumer's inbox, and
// writes through tx only: what it writes commits once per event, together
// with the inbox row, however often the bus delivers the event. It may run
// more than once for an event (after an error, or when the transaction
// failed to commit), so effects outside the database must be idempotent;
// ev.ID is the key for that. Events of a consumer come in no guaranteed
// order. Return an error to have the event delivered again after a backoff;
// after MaxDeliveries failed deliveries it becomes a dead letter.
type Handler func(ctx context.Context, tx store.Tx, ev Envelope) error

// ConsumerConfig configures a durable consumer.
type ConsumerConfig struct {
	// Name is the durable JetStream consumer's name and the consumer's key
	// in the inbox and the dead letters: letters, digits, '-' and '_'.
	// Every process running a consumer of the same Name shares its work,
	// and each event is handled by one of them. Required.
	Name string
	// Types are the event types to consume (e.g. "job.state_changed");
	// empty means every event. Changing them on an existing consumer
	// changes its filter.
	Types []string
	// Handler is the effect. Required.
	Handler Handler
	// MaxDeliveries: failed deliveries before an event becomes a dead
	// letter. Default 5.
	MaxDeliveries int
	// AckWait: how long JetStream waits for the ack of a delivered event
	// before delivering it again (a consumer died holding it). Handling an
	// event must take less. Default 30 s.
	AckWait time.Duration
	// NakBackoffBase and NakBackoffMax: after the n-th failed delivery the
	// event is delivered again in [c/2, c], c = min(base × 2^(n-1), max).
	// Defaults 1 s and 1 min.
	NakBackoffBase time.Duration
	NakBackoffMax  time.Duration
	// FetchBatch: events pulled ahead from JetStream. Default 16.
	FetchBatch int
	// RetryPollInterval: how often the consumer looks for dead letters an
	// admin asked to retry (POST /v1/dead-letters/{consumer}/{eventId}/retry).
	// Default 1 s.
	RetryPollInterval time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Now stamps inbox rows and dead letters; default time.Now.
	Now func() time.Time
}

// consumerName is what JetStream allows in a durable name, and more than
// enough for ours.
var consumerName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// WithDefaults returns c with zero fields set to their defaults.
func (c ConsumerConfig) WithDefaults() ConsumerConfig {
	if c.MaxDeliveries <= 0 {
		c.MaxDeliveries = MaxDeliveriesDefault
	}
	if c.AckWait <= 0 {
		c.AckWait = AckWaitDefault
	}
	if c.NakBackoffBase <= 0 {
		c.NakBackoffBase = NakBackoffBaseDefault
	}
	if c.NakBackoffMax <= 0 {
		c.NakBackoffMax = max(NakBackoffMaxDefault, c.NakBackoffBase)
	}
	if c.FetchBatch <= 0 {
		c.FetchBatch = FetchBatchDefault
	}
	if c.RetryPollInterval <= 0 {
		c.RetryPollInterval = RetryPollIntervalDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports an invalid configuration.
func (c ConsumerConfig) Validate() error {
	if !consumerName.MatchString(c.Name) {
		return fmt.Errorf("invalid ConsumerConfig: Name %q must be 1 to 64 letters, digits, '-' or '_'", c.Name)
	}
	if c.Handler == nil {
		return fmt.Errorf("invalid ConsumerConfig %s: Handler is required", c.Name)
	}
	for _, t := range c.Types {
		if t == "" {
			return fmt.Errorf("invalid ConsumerConfig %s: empty event type", c.Name)
		}
	}
	if c.NakBackoffMax < c.NakBackoffBase {
		return fmt.Errorf("invalid ConsumerConfig %s: NakBackoffMax %v is less than NakBackoffBase %v", c.Name, c.NakBackoffMax, c.NakBackoffBase)
	}
	return nil
}

// JetStream is the part of jetstream.JetStream a Consumer uses.
type JetStream interface {
	CreateOrUpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error)
}

// Consumer is a durable consumer of the event stream with exactly-once
// effects: a JetStream pull consumer on StreamName whose every event runs
// the Handler in store.InboxStore.InboxHandle. The ack is sent after the
// commit; a delivery the inbox has seen is acked and skipped; a failure is
// negatively acked with backoff, and the MaxDeliveries-th failure records a
// dead letter and terminates the message. Dead letters an admin asked to
// retry are claimed and handled again by the consumer itself (the API
// process may not run the handler), through the same inbox transaction.
type Consumer struct {
	cfg     ConsumerConfig
	store   store.InboxStore
	js      JetStream
	log     *slog.Logger
	backoff backoff.Policy
	life    service.Lifecycle
}

// NewConsumer makes a consumer; Start runs it.
func NewConsumer(st store.InboxStore, js JetStream, cfg ConsumerConfig) (*Consumer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if st == nil || js == nil {
		return nil, fmt.Errorf("consumer %s: a store and a JetStream are required", cfg.Name)
	}
	return &Consumer{
		cfg:     cfg,
		store:   st,
		js:      js,
		log:     cfg.Logger.With(attrService, "consumer", attrConsumer, cfg.Name),
		backoff: backoff.Policy{Base: cfg.NakBackoffBase, Max: cfg.NakBackoffMax},
	}, nil
}

// Name is the consumer's name.
func (c *Consumer) Name() string { return c.cfg.Name }

// Start creates (or updates) the durable JetStream consumer and starts
// handling events. The stream must exist. Starting a started consumer does
// nothing.
func (c *Consumer) Start(ctx context.Context) error {
	return c.life.Start(ctx, c.start)
}

func (c *Consumer) start(ctx context.Context, r *service.Run) error {
	subjects := make([]string, len(c.cfg.Types))
	for i, t := range c.cfg.Types {
		subjects[i] = NATSSubject(t)
	}
	cons, err := c.js.CreateOrUpdateConsumer(ctx, StreamName, jetstream.ConsumerConfig{
		Durable:        c.cfg.Name,
		Description:    "docket durable consumer " + c.cfg.Name,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        c.cfg.AckWait,
		MaxDeliver:     -1, // the consumer counts failures and dead-letters itself
		FilterSubjects: subjects,
	})
	if err != nil {
		return fmt.Errorf("consumer %s: create durable consumer on %s: %w", c.cfg.Name, StreamName, err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(c.cfg.FetchBatch))
	if err != nil {
		return fmt.Errorf("consumer %s: pull messages: %w", c.cfg.Name, err)
	}
	r.Go(func() {
		<-ctx.Done()
		iter.Stop() // ends receive's wait for the next message
	})
	r.Go(func() { c.receive(ctx, iter) })
	r.Go(func() { c.retryLoop(ctx) })
	return nil
}

// Stop stops pulling, lets the event being handled finish (its context is
// canceled) and returns when the consumer's goroutines have exited. Events
// pulled but not handled are delivered again after AckWait. Safe to call
// twice, and before Start.
func (c *Consumer) Stop() { c.life.Stop() }

// receive handles pulled messages until the iterator is stopped.
func (c *Consumer) receive(ctx context.Context, iter jetstream.MessagesContext) {
	for {
		msg, err := iter.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
				return
			}
			c.log.Warn("pull events failed", attrError, err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(c.cfg.NakBackoffBase):
			}
			continue
		}
		c.handleMsg(ctx, msg)
	}
}

// handleMsg handles one delivery and acks, naks or terminates it.
func (c *Consumer) handleMsg(ctx context.Context, msg jetstream.Msg) {
	deliveries := 1
	if meta, err := msg.Metadata(); err == nil {
		deliveries = int(meta.NumDelivered)
	}
	ev, err := decodeEnvelope(msg.Data())
	if err != nil {
		// Undecodable: no delivery will do better.
		id := msg.Headers().Get(jetstream.MsgIDHeader)
		if meta, merr := msg.Metadata(); id == "" && merr == nil {
			id = "seq-" + strconv.FormatUint(meta.Sequence.Stream, 10)
		}
		c.giveUp(ctx, msg, id, "", rawJSON(msg.Data()), deliveries, err)
		return
	}
	handled, err := c.handle(ctx, ev)
	switch {
	case err == nil:
		if err := msg.Ack(); err != nil {
			// Delivered again later; the inbox makes that a no-op.
			c.log.Warn("ack failed", attrEventID, ev.ID, attrError, err)
		}
		if !handled {
			c.log.Debug("duplicate delivery skipped", attrEventID, ev.ID, attrDeliveries, deliveries)
		}
	case ctx.Err() != nil:
		// Stopping: hand it back at once, without counting it as a
		// failure of the handler.
		_ = msg.Nak()
	case deliveries >= c.cfg.MaxDeliveries:
		c.giveUp(ctx, msg, ev.ID, ev.Type, rawJSON(msg.Data()), deliveries, err)
	default:
		delay := c.backoff.Delay(deliveries)
		c.log.Warn("event handler failed; will retry", attrEventID, ev.ID, attrDeliveries, deliveries,
			"retry_in", delay, attrError, err)
		if err := msg.NakWithDelay(delay); err != nil {
			c.log.Warn("nak failed", attrEventID, ev.ID, attrError, err)
		}
	}
}

// handle runs the handler in the inbox transaction of ev.
func (c *Consumer) handle(ctx context.Context, ev Envelope) (bool, error) {
	p := &store.InboxHandleParams{Consumer: c.cfg.Name, EventID: ev.ID, Now: c.cfg.Now()}
	return c.store.InboxHandle(ctx, p, func(ctx context.Context, tx store.Tx) (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("event handler panicked: %v", v)
			}
		}()
		return c.cfg.Handler(ctx, tx, ev)
	})
}

// giveUp records a dead letter and terminates the message; if the record
// fails, the message is delivered again later instead (nothing is lost).
func (c *Consumer) giveUp(ctx context.Context, msg jetstream.Msg, id, typ string, envelope json.RawMessage, deliveries int, cause error) {
	_, err := c.store.DeadLetterRecord(ctx, &store.DeadLetterRecordParams{
		Consumer: c.cfg.Name, EventID: id, EventType: typ, Envelope: envelope,
		Deliveries: deliveries, LastError: cause.Error(), Now: c.cfg.Now(),
	})
	if err != nil {
		c.log.Error("record dead letter failed; will retry", attrEventID, id, attrError, err)
		_ = msg.NakWithDelay(c.backoff.Delay(deliveries))
		return
	}
	c.log.Error("event is a dead letter", attrEventID, id, attrDeliveries, deliveries, attrError, cause)
	if err := msg.TermWithReason("dead letter"); err != nil {
		c.log.Warn("terminate failed", attrEventID, id, attrError, err)
	}
}

// retryLoop handles the dead letters an admin asked to retry.
func (c *Consumer) retryLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.RetryPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.retryDeadLetters(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("retry dead letters failed", attrError, err)
		}
	}
}

// retryDeadLetters claims retry requests and handles each event again. A
// success removes the dead letter (in the inbox transaction); a failure
// counts one more delivery on it.
func (c *Consumer) retryDeadLetters(ctx context.Context) error {
	ds, err := c.store.DeadLetterClaimRetries(ctx, &store.DeadLetterClaimRetriesParams{Consumer: c.cfg.Name, Max: c.cfg.FetchBatch})
	if err != nil {
		return err
	}
	for i, d := range ds {
		ev, handleErr := decodeEnvelope(d.Envelope)
		if handleErr == nil {
			_, handleErr = c.handle(ctx, ev)
		}
		if handleErr == nil {
			c.log.Info("dead letter handled on retry", attrEventID, d.EventID)
			continue
		}
		if ctx.Err() != nil {
			// Stopping: put back the requests claimed and not done.
			c.requestAgain(ctx, ds[i:])
			return ctx.Err()
		}
		c.log.Warn("dead letter failed again", attrEventID, d.EventID, attrError, handleErr)
		if _, err := c.store.DeadLetterRecord(ctx, &store.DeadLetterRecordParams{
			Consumer: c.cfg.Name, EventID: d.EventID, EventType: d.EventType, Envelope: d.Envelope,
			Deliveries: 1, LastError: handleErr.Error(), Now: c.cfg.Now(),
		}); err != nil {
			return err
		}
	}
	return nil
}

// requestAgainTimeout bounds requestAgain, which runs after ctx ended.
const requestAgainTimeout = 5 * time.Second

// requestAgain renews the retry requests of ds (claimed, not handled).
func (c *Consumer) requestAgain(ctx context.Context, ds []*store.DeadLetter) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestAgainTimeout)
	defer cancel()
	for _, d := range ds {
		if _, err := c.store.DeadLetterRequestRetry(ctx, &store.DeadLetterRequestRetryParams{
			Consumer: c.cfg.Name, EventID: d.EventID, Now: d.RetryRequestedAt,
		}); err != nil && !errors.Is(err, store.ErrNotFound) {
			c.log.Warn("renew retry request failed", attrEventID, d.EventID, attrError, err)
		}
	}
}

// decodeEnvelope decodes a message body; an envelope needs an id.
func decodeEnvelope(data []byte) (Envelope, error) {
	var ev Envelope
	if err := json.Unmarshal(data, &ev); err != nil {
		return Envelope{}, fmt.Errorf("decode event envelope: %w", err)
	}
	if ev.ID == "" {
		return Envelope{}, errors.New("decode event envelope: no id")
	}
	return ev, nil
}

// rawJSON is data when it is JSON, else data as a JSON string.
func rawJSON(data []byte) json.RawMessage {
	if json.Valid(data) {
		return json.RawMessage(data)
	}
	b, _ := json.Marshal(string(data))
	return b
}
