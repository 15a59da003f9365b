package natsserver

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/protocol"
)

// TestAuthPrio3Roles: on a server generated from the permission table, the
// prio3-leader credential's request on crowdlog.prio3.helper (1.5 MiB,
// over nats-server's default max_payload) reaches the prio3-helper
// credential, whose answer through natsconn.Respond comes back byte for
// byte; and the server refuses (permissions violation) the helper
// publishing requests itself or to relay b, the leader or the PDD
// aggregator listening on the helper's subject or in the helper's inbox,
// and relay b or a client sending a request there.
func TestAuthPrio3Roles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	ns, err := Options{Dir: filepath.Join(dir, "js")}.StartAuth(ctx, keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	conn := func(r natsauth.Role) *nats.Conn {
		t.Helper()
		nc, err := natsconn.ConnectAs(ns.URL, string(r), natsconn.RoleSecurity(keys, r))
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	helper := conn(natsauth.Prio3Helper)
	sub, err := helper.SubscribeSync(protocol.Prio3HelperSubject)
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Flush(); err != nil || helper.LastError() != nil {
		t.Fatalf("helper subscribes %s: %v %v", protocol.Prio3HelperSubject, err, helper.LastError())
	}
	served := make(chan error, 1)
	go func() {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			served <- err
			return
		}
		served <- natsconn.Respond(m, append([]byte("answer "), m.Data...))
	}()
	req := make([]byte, 3<<19)
	for i := range req {
		req[i] = byte(i * 13)
	}
	leader := conn(natsauth.Prio3Leader)
	resp, err := leader.Request(protocol.Prio3HelperSubject, req, 10*time.Second)
	if err != nil {
		t.Fatalf("leader's request to the helper: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("helper's answer: %v", err)
	}
	if !bytes.Equal(resp.Data, append([]byte("answer "), req...)) {
		t.Fatalf("leader got %d bytes, not the helper's answer", len(resp.Data))
	}

	refused := 0
	for _, c := range []struct {
		name string
		role natsauth.Role
		do   func(nc *nats.Conn) error
	}{
		{"helper publishes a request", natsauth.Prio3Helper, func(nc *nats.Conn) error { return nc.Publish(protocol.Prio3HelperSubject, []byte("x")) }},
		{"helper publishes to relay b", natsauth.Prio3Helper, func(nc *nats.Conn) error { return nc.Publish(protocol.RelaySubject("b"), []byte("x")) }},
		{"leader listens on the helper subject", natsauth.Prio3Leader, func(nc *nats.Conn) error {
			_, err := nc.SubscribeSync(protocol.Prio3HelperSubject)
			return err
		}},
		{"leader listens in the helper's inbox", natsauth.Prio3Leader, func(nc *nats.Conn) error {
			_, err := nc.SubscribeSync(natsauth.InboxPrefix(natsauth.Prio3Helper) + ".>")
			return err
		}},
		{"PDD aggregator listens on the helper subject", natsauth.Aggregator, func(nc *nats.Conn) error {
			_, err := nc.SubscribeSync(protocol.Prio3HelperSubject)
			return err
		}},
		{"relay b sends a request", natsauth.RelayB, func(nc *nats.Conn) error { return nc.Publish(protocol.Prio3HelperSubject, []byte("x")) }},
		{"client sends a request", natsauth.Client, func(nc *nats.Conn) error { return nc.Publish(protocol.Prio3HelperSubject, []byte("x")) }},
	} {
		nc := conn(c.role)
		if err := c.do(nc); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := nc.FlushTimeout(5 * time.Second); err != nil {
			t.Fatalf("%s: flush: %v", c.name, err)
		}
		if !errors.Is(nc.LastError(), nats.ErrPermissionViolation) {
			t.Errorf("%s: not refused (last error %v)", c.name, nc.LastError())
			continue
		}
		refused++
	}
	if refused != 7 {
		t.Fatalf("%d of 7 off-table uses refused", refused)
	}
}
