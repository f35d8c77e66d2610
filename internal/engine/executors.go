package engine

import (
	"sync"
	"time"
)

// executorIdle is how long an executor waits for an attempt before it
// exits. Under a steady load an executor is back at work within
// milliseconds (a fetch every few, a poll every PollInterval at worst); a
// load that stops gives the executors' stacks back within this.
const executorIdle = 5 * time.Second

// executors are the goroutines that run attempts, kept between attempts:
// an executor that finished one takes the next launched one, so an attempt
// costs no new goroutine and no stack grown anew (a new goroutine, its
// stack grown for an attempt and freed at its end were a tenth of the
// engine's CPU per job in the burn benchmark).
//
// Launched executions wait in a queue, first in first out. Executors
// searching it (started or woken to take from it, or back from an
// attempt) are counted, and the queue is never left holding an execution
// with no executor searching: whoever adds to it or takes from it and
// sees none wakes a parked executor or starts one. So no execution waits
// for another's handler, as with a goroutine each; but a burst of quick
// attempts is run by the few executors that keep finishing theirs, not
// by one goroutine each, and the number of executors follows the number
// of handlers running at once (at most the engine's concurrency, plus the
// one searching), not the size of the bursts.
//
// Parked executors wait in a list, the most recently parked first (the
// others stay idle and exit after executorIdle). Stop ends the parked
// ones and waits for every executor not running a handler to exit; one
// running a handler that ignored its cancellation exits when it returns.
type executors struct {
	run  func(*execution) // an attempt, start to end (Engine.execute)
	idle time.Duration    // executorIdle; shorter in tests

	mu    sync.Mutex
	queue []*execution // launched, not yet taken: queue[head:]
	head  int
	// searching counts the executors on their way to the queue: it is
	// never 0 while the queue holds an execution.
	searching int
	busy      int       // executors running an attempt
	live      int       // executors, in any state
	started   int       // executors ever started (tests)
	parked    *executor // the most recently parked; a list through next
	closed    bool      // Stop: parked executors exit, none parks again
	exited    *sync.Cond
}

// executor is one goroutine of executors.
type executor struct {
	wake       chan struct{} // a token: taken off the parked list to search
	timer      *time.Timer   // executorIdle while parked
	prev, next *executor     // in the parked list
	isParked   bool
}

func newExecutors(run func(*execution)) *executors {
	x := &executors{run: run, idle: executorIdle}
	x.exited = sync.NewCond(&x.mu)
	return x
}

// launch queues executions to run, each on an executor.
func (x *executors) launch(exs []*execution) {
	x.mu.Lock()
	if x.head == len(x.queue) {
		x.queue, x.head = x.queue[:0], 0
	} else if x.head > len(x.queue)/2 {
		n := copy(x.queue, x.queue[x.head:])
		clear(x.queue[n:])
		x.queue, x.head = x.queue[:n], 0
	}
	x.queue = append(x.queue, exs...)
	x.ensureSearching()
	x.mu.Unlock()
}

// ensureSearching wakes or starts an executor when the queue holds an
// execution and none is searching. x.mu is held.
func (x *executors) ensureSearching() {
	if x.searching > 0 || x.head == len(x.queue) {
		return
	}
	x.searching++
	if w := x.parked; w != nil {
		x.unpark(w)
		w.wake <- struct{}{} // never blocks: one token per wake, taken before the next park
		return
	}
	x.live++
	x.started++
	go x.loop(&executor{wake: make(chan struct{}, 1)})
}

// loop is an executor's goroutine. It starts searching (counted by whoever
// started it).
func (x *executors) loop(w *executor) {
	growStack(0)
	done := false
	defer func() {
		if !done {
			// The handler ended the goroutine (runtime.Goexit, as
			// testing's FailNow does): it ran the attempt's deferred
			// calls, as a goroutine of its own would. The executor is
			// lost; it was busy, not searching, so the queue keeps its
			// searcher.
			x.mu.Lock()
			x.busy--
			x.live--
			x.exited.Broadcast()
			x.mu.Unlock()
		}
	}()
	for {
		ex := x.next(w)
		if ex == nil {
			done = true
			return
		}
		x.run(ex)
		x.mu.Lock()
		x.busy--
		x.searching++
		x.mu.Unlock()
	}
}

// next takes the next execution for w, which is searching, parking w
// while there is none; nil when w is to exit (idle too long, or Stop).
func (x *executors) next(w *executor) *execution {
	x.mu.Lock()
	for {
		if x.head < len(x.queue) {
			ex := x.queue[x.head]
			x.queue[x.head] = nil
			x.head++
			x.searching--
			x.busy++
			x.ensureSearching() // the rest of the queue gets its own
			if x.closed {
				x.exited.Broadcast() // close waits for the queue too
			}
			x.mu.Unlock()
			return ex
		}
		x.searching--
		if x.closed {
			x.live--
			x.exited.Broadcast()
			x.mu.Unlock()
			return nil
		}
		x.park(w)
		x.mu.Unlock()
		if !x.wait(w) {
			return nil
		}
		// A parked executor's stack may have been shrunk by the
		// garbage collector: grow it again while shallow.
		growStack(0)
		x.mu.Lock() // woken: searching again, counted by the waker
	}
}

// wait waits, parked, until w is woken (true) or has been idle for
// executorIdle and is taken off the list (false: it exits).
func (x *executors) wait(w *executor) bool {
	if w.timer == nil {
		w.timer = time.NewTimer(x.idle)
	} else {
		w.timer.Reset(x.idle)
	}
	select {
	case <-w.wake:
		w.timer.Stop()
		return true
	case <-w.timer.C:
	}
	x.mu.Lock()
	if w.isParked {
		x.unpark(w)
		x.live--
		x.exited.Broadcast()
		x.mu.Unlock()
		return false
	}
	x.mu.Unlock()
	<-w.wake // woken as the timer fired: the token is on its way
	return true
}

// park puts w first in the parked list. x.mu is held.
func (x *executors) park(w *executor) {
	w.isParked, w.prev, w.next = true, nil, x.parked
	if x.parked != nil {
		x.parked.prev = w
	}
	x.parked = w
}

// unpark takes w off the parked list. x.mu is held.
func (x *executors) unpark(w *executor) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		x.parked = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	}
	w.isParked, w.prev, w.next = false, nil, nil
}

// close ends the parked executors, and every other one as it finds the
// queue empty, and waits until only those running a handler remain.
func (x *executors) close() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.closed = true
	for x.parked != nil {
		w := x.parked
		x.unpark(w)
		x.searching++
		w.wake <- struct{}{}
	}
	for x.live > x.busy || x.head < len(x.queue) {
		x.exited.Wait()
	}
}

// counts reports the executors alive, parked and ever started (tests).
func (x *executors) counts() (live, parked, started int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for w := x.parked; w != nil; w = w.next {
		parked++
	}
	return x.live, parked, x.started
}
