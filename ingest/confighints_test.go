package ingest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestRandomnessRetryFor: Config.RandomnessRetryFor reaches the device's
// randomness client. Against a real NATS where no randomness service
// answers, a negative value fails the first request at once with
// nats.ErrNoResponders, and 300 ms re-sends for that long and says so,
// where the default would re-send for five minutes.
func TestRandomnessRetryFor(t *testing.T) {
	url, keys, _ := natsDeployment(t)
	ctx := context.Background()
	for _, c := range []struct {
		retry time.Duration
		check func(error) bool
		want  string
	}{
		{-1, func(err error) bool { return errors.Is(err, nats.ErrNoResponders) }, "nats.ErrNoResponders"},
		{300 * time.Millisecond, func(err error) bool {
			return err != nil && strings.Contains(err.Error(), "no answer within 300ms of retries")
		}, "no answer within 300ms"},
	} {
		d, err := New(ctx, Config{Memory: true, NATS: url, KeysDir: keys, SkipRouteCheck: true, Epoch: "e1", K: 2, RandomnessRetryFor: c.retry})
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.Submit(ctx, "query", art("made up weather", 0))
		d.Close(ctx)
		if !c.check(err) {
			t.Errorf("RandomnessRetryFor %v: Submit error %v, want %s", c.retry, err, c.want)
		}
	}
}

// TestNewErrorsNameConfigFields: New's errors name the Config field a
// library caller sets, never the crowdlog command's flags or commands.
func TestNewErrorsNameConfigFields(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "nats://" + ln.Addr().String()
	ln.Close()
	url, keys, _ := natsDeployment(t)
	empty := t.TempDir()
	cert := filepath.Join(t.TempDir(), "client.pem")
	os.WriteFile(cert, []byte("not a certificate"), 0o600)
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no NATS server", Config{Memory: true, NATS: closed, KeysDir: keys, SkipRouteCheck: true, Epoch: "e1", K: 2}, "Config.NATS"},
		{"certificate without key", Config{Memory: true, NATS: url, KeysDir: keys, SkipRouteCheck: true, Epoch: "e1", K: 2,
			NATSSecurity: NATSSecurity{CertFile: cert}}, "Config.NATSSecurity.KeyFile"},
		{"missing NKey seed", Config{Memory: true, NATS: url, KeysDir: keys, SkipRouteCheck: true, Epoch: "e1", K: 2,
			NATSSecurity: NATSSecurity{NKeyFile: filepath.Join(empty, "nats-client.nk")}}, "Config.NATSSecurity.NKeyFile"},
		{"no route keys", Config{Memory: true, NATS: url, KeysDir: empty, SkipRouteCheck: true, Epoch: "e1", K: 2}, "Config.KeysDir"},
	} {
		d, err := New(ctx, c.cfg)
		if err == nil {
			d.Close(ctx)
			t.Errorf("%s: New succeeded", c.name)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s: %q does not name %s", c.name, msg, c.want)
		}
		for _, cli := range []string{"--nats", "crowdlog keys", "crowdlog nats-config nkey --role"} {
			if strings.Contains(msg, cli) {
				t.Errorf("%s: %q names the command line (%s)", c.name, msg, cli)
			}
		}
	}
}
