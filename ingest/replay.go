package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/sync/errgroup"

	"github.com/crowdlog/crowdlog/ingest/aol"
)

// ReplaySummary is what a replay did.
type ReplaySummary struct {
	Users   int       // clients replayed (AnonIDs)
	Reports int64     // reports published
	Log     aol.Stats // lines read, bad lines with line numbers
	// Downstream, when the caller asked the aggregators after the replay
	// (FetchDownstream; crowdlog ingest does), is what they admitted and
	// refused of the replay's pipeline and epoch so far, over every
	// device; nil when not asked or no aggregator answered.
	Downstream *Downstream
}

// Replay replays an AOL log as many devices: every AnonID becomes its own
// Device in front of Client, Workers at once. Each device's state (its
// user secret of the epoch, what it sent) is in memory, unless StateDir is
// set: then it lives in StateDir/users/ID, ID the first 16 bytes of
// SHA-256(AnonID) in hex, so a replay restarted on the same log sends
// nothing twice (FT_u counts each AnonID once).
type Replay struct {
	Client   *Client
	Log      aol.Options // how the log is read (its time format); zero = detected per file
	StateDir string      // per-device state on disk; "" = in memory
	Workers  int         // default GOMAXPROCS
	Progress io.Writer   // progress bar destination (e.g. os.Stderr); nil = none
	// Logger, when set and Progress is nil, gets a progress line every
	// LogEvery (default 10 s): clients done and reports sent, nothing else.
	Logger   *slog.Logger
	LogEvery time.Duration
	// Tokens, when set, turns tokens on: it returns the issuer
	// client of the identity of the user with AnonID id (the identity the
	// operator enrolled for it); each replayed device then spends that
	// identity's tokens, its ω through Client.RandomnessWith. nil = off.
	Tokens func(id string) (Issuer, error)
}

// UserDir is the state directory of the replayed device of AnonID id
// under a Replay's StateDir: StateDir/users/ID, ID the first 16 bytes of
// SHA-256(AnonID) in hex.
func UserDir(stateDir, id string) string {
	h := sha256.Sum256([]byte(id))
	return filepath.Join(stateDir, "users", hex.EncodeToString(h[:16]))
}

// Run replays the log at path. Bad lines are counted in the summary, never
// fatal; the first client error (e.g. randomness service unreachable) stops
// the replay and is returned.
func (rp *Replay) Run(ctx context.Context, path string) (ReplaySummary, error) {
	workers := rp.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	var sum ReplaySummary
	var reports atomic.Int64
	var bar *progressbar.ProgressBar
	if rp.Progress != nil {
		bar = progressbar.NewOptions64(-1, progressbar.OptionSetWriter(rp.Progress),
			progressbar.OptionSetDescription("ingest: clients"), progressbar.OptionShowCount(),
			progressbar.OptionShowIts(), progressbar.OptionSetItsString("clients"),
			progressbar.OptionThrottle(200_000_000), progressbar.OptionClearOnFinish())
	}
	var done atomic.Int64
	if bar == nil && rp.Logger != nil {
		every := rp.LogEvery
		if every <= 0 {
			every = 10 * time.Second
		}
		tick := time.NewTicker(every)
		defer tick.Stop()
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case <-tick.C:
					rp.Logger.Info("ingest progress", "clients", done.Load(), "reports", reports.Load())
				case <-stop:
					return
				}
			}
		}()
	}
	g, gctx := errgroup.WithContext(ctx)
	users := make(chan aol.User, workers)
	var mu sync.Mutex
	for i := 0; i < workers; i++ {
		g.Go(func() error {
			for u := range users {
				dev, err := rp.device(u.AnonID)
				if err != nil {
					return err
				}
				n, err := dev.Submit(gctx, rp.Client.App.Name(), rp.Client.App.Mine(u.Records)...)
				reports.Add(int64(n))
				if err != nil {
					return fmt.Errorf("client: %w", err)
				}
				done.Add(1)
				if bar != nil {
					mu.Lock()
					bar.Add(1)
					mu.Unlock()
				}
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(users)
		st, err := aol.ReadUsersOptions(path, rp.Log, func(u aol.User) error {
			select {
			case users <- u:
				sum.Users++
				return nil
			case <-gctx.Done():
				return gctx.Err()
			}
		})
		sum.Log = st
		return err
	})
	err := g.Wait()
	if bar != nil {
		bar.Finish()
	}
	sum.Reports = reports.Load()
	return sum, err
}

// device is the replayed device of AnonID id.
func (rp *Replay) device(id string) (*Device, error) {
	var iss Issuer
	if rp.Tokens != nil {
		var err error
		if iss, err = rp.Tokens(id); err != nil {
			return nil, fmt.Errorf("client identity: %w", err)
		}
	}
	if rp.StateDir == "" {
		return newTokenDevice(rp.Client, newMemStore(), iss), nil
	}
	st, err := openDiskStore(UserDir(rp.StateDir, id))
	if err != nil {
		return nil, err
	}
	return newTokenDevice(rp.Client, st, iss), nil
}
