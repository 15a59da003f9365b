package coordinator

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/blind"
)

type env struct {
	dir     string
	ns      *natsserver.Server
	nc      *nats.Conn
	brokers []string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{dir: t.TempDir()}
	b, err := kafka.Start(ctx, filepath.Join(e.dir, "kafka"), 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := kafka.EnsureTopics(ctx, b.Addr, 2, "vectors"); err != nil {
		t.Fatal(err)
	}
	e.brokers = []string{b.Addr}
	e.startNATS(t)
	return e
}

func (e *env) startNATS(t *testing.T) {
	t.Helper()
	ns, err := natsserver.Options{Dir: filepath.Join(e.dir, "nats"), Port: portOf(e.ns)}.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e.ns = ns
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	e.nc = nc
	t.Cleanup(func() { nc.Close(); ns.Shutdown() })
}

func portOf(s *natsserver.Server) int {
	if s == nil {
		return 0
	}
	return s.Port
}

func (e *env) coordinator(t *testing.T, cp Campaign) *Coordinator {
	t.Helper()
	c := &Coordinator{NC: e.nc, Brokers: e.brokers, Campaign: cp}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func register(t *testing.T, nc *nats.Conn) (string, []byte) {
	t.Helper()
	k, _ := blind.GenerateKey()
	var rep blind.RegisterReply
	if err := natsconn.RequestJSON(context.Background(), nc, protocol.PDDRegisterSubject, blind.RegisterRequest{PublicKey: k.PublicKey().Bytes()}, &rep); err != nil || rep.Error != "" {
		t.Fatalf("register: %v %s", err, rep.Error)
	}
	return rep.ClientID, k.PublicKey().Bytes()
}

func ping(t *testing.T, nc *nats.Conn, id string) blind.Instructions {
	t.Helper()
	var ins blind.Instructions
	if err := natsconn.RequestJSON(context.Background(), nc, protocol.PDDPingSubject, blind.PingRequest{ClientID: id, Campaign: "flu"}, &ins); err != nil || ins.Error != "" {
		t.Fatalf("ping: %v %s", err, ins.Error)
	}
	return ins
}

// Groups are formed from the previous day's active clients, handed out on
// pings with the members' keys, and the coordinator's state — clients,
// clock, groups — survives a restart of the coordinator and of NATS.
func TestGroupsAndRestart(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	list, _ := keywords.Parse(stringsReader("flu\nfever\ncough\n"))
	cp := Campaign{Name: "flu", List: list, ListName: "test", GroupSize: 3, Delay: 1}
	c := e.coordinator(t, cp)
	const day = 13000
	if _, err := c.Advance(ctx, day); err != nil {
		t.Fatal(err)
	}
	pubs := map[string][]byte{}
	var ids []string
	for i := 0; i < 7; i++ {
		id, pk := register(t, e.nc)
		ids = append(ids, id)
		pubs[id] = pk
	}
	// day 13000: clients 0..5 active (6 → two groups of 3); client 6 not
	for _, id := range ids[:6] {
		if ins := ping(t, e.nc, id); len(ins.Tasks) != 0 || ins.L != 3 {
			t.Fatalf("tasks before any group: %+v", ins)
		}
	}
	rep, err := c.Advance(ctx, day+1)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Groups != 2 || rep.Active != 6 || rep.Grouped != 6 {
		t.Fatalf("advance: %+v", rep)
	}
	if ins := ping(t, e.nc, ids[6]); len(ins.Tasks) != 0 {
		t.Fatalf("inactive client got a task: %+v", ins.Tasks)
	}
	tasks := map[string]blind.Task{}
	for _, id := range ids[:6] {
		ins := ping(t, e.nc, id)
		if len(ins.Tasks) != 1 || ins.Tasks[0].Round != day || ins.Tasks[0].Deadline != day+2 {
			t.Fatalf("client tasks %+v", ins.Tasks)
		}
		tk := ins.Tasks[0]
		if len(tk.Members) != 3 || !reflect.DeepEqual(tk.Members[tk.Member], pubs[id]) || tk.T != blind.Threshold(3) {
			t.Fatalf("task does not list the client at its index: %+v", tk)
		}
		tasks[id] = tk
	}

	// restart the coordinator and the NATS server (same store directory)
	c.Close()
	e.nc.Close()
	e.ns.Shutdown()
	e.startNATS(t)
	c2 := e.coordinator(t, cp)
	if d, ok, err := c2.Day(ctx); err != nil || !ok || d != day+1 {
		t.Fatalf("clock after restart: %d %v %v", d, ok, err)
	}
	// re-advancing the current day is a no-op: the groups stay as formed
	if rep, err := c2.Advance(ctx, day+1); err != nil || rep.Day != day+1 {
		t.Fatalf("re-advance: %+v %v", rep, err)
	}
	for _, id := range ids[:6] {
		ins := ping(t, e.nc, id)
		if len(ins.Tasks) != 1 || !reflect.DeepEqual(ins.Tasks[0], tasks[id]) {
			t.Fatalf("task changed across the restart: %+v vs %+v", ins.Tasks, tasks[id])
		}
	}
	// a deposit marks the task done
	tk := tasks[ids[0]]
	var rp blind.Reply
	if err := natsconn.RequestJSON(ctx, e.nc, protocol.PDDDepositSubject, blind.DepositRequest{Campaign: "flu", Round: tk.Round, Group: tk.Group, From: uint16(tk.Member)}, &rp); err != nil || rp.Error != "" {
		t.Fatalf("deposit: %v %s", err, rp.Error)
	}
	if ins := ping(t, e.nc, ids[0]); len(ins.Tasks) != 0 {
		t.Fatalf("task still owed after the deposit: %+v", ins.Tasks)
	}
}

// A recovery request for a group that would leave fewer than t survivors
// (here one) is refused, never stored, never served.
func TestRecoveryRequestValidated(t *testing.T) {
	e := newEnv(t)
	list, _ := keywords.Parse(stringsReader("flu\n"))
	e.coordinator(t, Campaign{Name: "flu", List: list, GroupSize: 3})
	var rp blind.Reply
	req := blind.Request{Instance: blind.Instance{Campaign: "flu", Round: 1, Group: 0}, N: 3, T: 2, Dropped: []uint16{0, 1}}
	if err := natsconn.RequestJSON(context.Background(), e.nc, protocol.PDDRecoverySubject, req, &rp); err != nil {
		t.Fatal(err)
	}
	if rp.Error == "" {
		t.Fatal("one-survivor recovery accepted")
	}
}

func TestNoCoordinatorError(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var rep blind.RegisterReply
	err := natsconn.RequestJSON(ctx, e.nc, protocol.PDDRegisterSubject, blind.RegisterRequest{PublicKey: make([]byte, 32)}, &rep)
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("want a no-responders error, got %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"client_id":"0123456789abcdef0123456789abcdef","campaign":"flu"}`))
	f.Add([]byte(`{"public_key":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}`))
	f.Add([]byte(`{"campaign":"flu","round":1,"group":0,"from":1,"bundles":[{"From":1,"To":0,"Ciphertext":"AAAA"}]}`))
	f.Add([]byte(`{"Instance":{"Campaign":"flu","Round":1,"Group":0},"N":5,"T":3,"Dropped":[1]}`))
	f.Add([]byte(`{"day":5}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, parse := range []func([]byte) error{
			func(b []byte) error { _, err := blind.ParsePing(b); return err },
			func(b []byte) error { _, err := blind.ParseRegister(b); return err },
			func(b []byte) error { _, err := blind.ParseDeposit(b); return err },
			func(b []byte) error { _, err := blind.ParseRecovery(b); return err },
			func(b []byte) error { _, err := blind.ParseAdvance(b); return err },
		} {
			if err := parse(b); err != nil && !errors.Is(err, blind.ErrMalformedCoordination) {
				t.Fatalf("error not wrapping ErrMalformed: %v", err)
			}
		}
	})
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
