// Package ready decides a role's readiness (/readyz) from named checks of
// its dependencies: NATS connected, JetStream answering, a directory
// present, and a Kafka broker answering a metadata request
// (infra/kafka.ReadyCheck, kept there so this package links no Kafka
// client). A Checker runs every
// check concurrently, each bounded by its timeout (at most MaxTimeout), in
// a background loop every Interval; Ready returns the latest result, so a
// dependency that goes away turns the role unready within Interval +
// MaxTimeout, and back to ready as soon as a round passes again.
//
// Failures are reported one line per check, "name: error", with URL
// credentials removed and line breaks folded, so a /readyz body can be
// shown to whoever probes it.
package ready

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	// MaxTimeout bounds every check (a longer Check.Timeout is cut to it).
	MaxTimeout = 2 * time.Second
	// Interval is how often Start's loop runs the checks.
	Interval = 2 * time.Second
)

// Check is one named readiness check. Fn returns nil when the dependency
// is usable; it should return when ctx ends (ctx carries the timeout).
type Check struct {
	Name    string
	Fn      func(ctx context.Context) error
	Timeout time.Duration // 0 or more than MaxTimeout = MaxTimeout
}

// Checker runs a role's checks. The zero value has no checks (always
// ready); build one with New.
type Checker struct {
	checks []Check
	log    *slog.Logger

	mu      sync.Mutex
	started bool
	done    bool             // a round has completed
	failing map[string]error // by check name, from the latest round
	running map[string]bool  // checks still running past their timeout
}

// New returns a Checker of checks (names should be distinct). log
// receives a line each time a check starts or stops failing; nil means
// slog.Default().
func New(log *slog.Logger, checks ...Check) *Checker {
	if log == nil {
		log = slog.Default()
	}
	return &Checker{checks: checks, log: log, failing: map[string]error{}, running: map[string]bool{}}
}

// Names returns the checks' names, in order.
func (c *Checker) Names() []string {
	if c == nil {
		return nil
	}
	names := make([]string, len(c.checks))
	for i, ch := range c.checks {
		names[i] = ch.Name
	}
	return names
}

// Start runs the checks now and then every interval (0 = Interval) until
// ctx ends; from then on Ready answers the latest round's result. Calling
// it more than once does nothing more.
func (c *Checker) Start(ctx context.Context, interval time.Duration) {
	if c == nil {
		return
	}
	if interval <= 0 {
		interval = Interval
	}
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return
	}
	c.started = true
	c.mu.Unlock()
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			c.round(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// errPending is Ready's answer before Start's first round completed.
var errPending = errors.New("readiness: first check still running")

// Ready returns nil when every check passed, else an error whose message
// has one line "name: error" per failing check, in the checks' order.
// After Start it returns the latest round's result ("first check still
// running" before the first round ends); without Start it runs the checks
// now. A nil or empty Checker is always ready.
func (c *Checker) Ready(ctx context.Context) error {
	if c == nil || len(c.checks) == 0 {
		return nil
	}
	c.mu.Lock()
	started, done := c.started, c.done
	c.mu.Unlock()
	if !started {
		c.round(ctx)
	} else if !done {
		return errPending
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var lines []string
	for _, ch := range c.checks {
		if err := c.failing[ch.Name]; err != nil {
			lines = append(lines, ch.Name+": "+Clean(err.Error()))
		}
	}
	if len(lines) == 0 {
		return nil
	}
	return errors.New(strings.Join(lines, "\n"))
}

// Register exposes crowdlog_ready_check{check="NAME"}: 1 while the check
// passes, 0 while it fails (from the latest round).
func (c *Checker) Register(reg prometheus.Registerer) {
	if c == nil {
		return
	}
	for _, ch := range c.checks {
		name := ch.Name
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "crowdlog_ready_check",
			Help:        "1 while the named readiness check of /readyz passes, 0 while it fails.",
			ConstLabels: prometheus.Labels{"check": name},
		}, func() float64 {
			c.mu.Lock()
			defer c.mu.Unlock()
			if !c.done || c.failing[name] != nil {
				return 0
			}
			return 1
		}))
	}
}

// round runs every check concurrently and records each result as soon as
// it is known (a check that fails at once is not held back by a slow one).
func (c *Checker) round(ctx context.Context) {
	var wg sync.WaitGroup
	for _, ch := range c.checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.record(ch.Name, c.run(ctx, ch))
		}()
	}
	wg.Wait()
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
}

func (c *Checker) record(name string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch prev := c.failing[name]; {
	case err != nil && prev == nil:
		c.log.Warn("readiness: check failing", "check", name, "err", Clean(err.Error()))
	case err == nil && prev != nil:
		c.log.Info("readiness: check passes again", "check", name)
	}
	if err != nil {
		c.failing[name] = err
	} else {
		delete(c.failing, name)
	}
}

// run runs one check within its timeout. A check that ignores its context
// is left to finish in the background and reported as timed out; it is not
// started again while it still runs.
func (c *Checker) run(ctx context.Context, ch Check) error {
	timeout := ch.Timeout
	if timeout <= 0 || timeout > MaxTimeout {
		timeout = MaxTimeout
	}
	c.mu.Lock()
	if c.running[ch.Name] {
		c.mu.Unlock()
		return fmt.Errorf("previous check still running, past its %v timeout", timeout)
	}
	c.running[ch.Name] = true
	c.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	res := make(chan error, 1)
	go func() {
		defer cancel()
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("check panicked: %v", r)
				}
			}()
			return ch.Fn(cctx)
		}()
		c.mu.Lock()
		delete(c.running, ch.Name)
		c.mu.Unlock()
		res <- err
	}()
	select {
	case err := <-res:
		return err
	case <-cctx.Done():
		// give a check that honours ctx a moment to return its own error
		select {
		case err := <-res:
			if err == nil {
				return nil
			}
			return fmt.Errorf("no answer within %v: %w", timeout, err)
		case <-time.After(100 * time.Millisecond):
			return fmt.Errorf("no answer within %v", timeout)
		}
	}
}

var userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@`)

// Clean makes err text fit one /readyz line: credentials in URLs
// ("scheme://user:pass@host") replaced by "scheme://REDACTED@host", line
// breaks folded into "; ".
func Clean(s string) string {
	s = userinfo.ReplaceAllString(s, "${1}REDACTED@")
	s = strings.ReplaceAll(s, "\r", "")
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ")
}
