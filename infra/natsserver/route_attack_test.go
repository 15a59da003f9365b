package natsserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/natsauth"
)

// routeJoin starts server a, a member of cluster "crowdlog" (from the
// configuration natsauth generates, with route authorization, when
// authorized; else with an unauthenticated cluster block, as the
// configuration read before it had none and operators added their own),
// then a server routing to it without the credential and one with it. It
// returns the routes a holds after each joined.
func routeJoin(t *testing.T, authorized bool) (intruder, member int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	ports, err := freePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := natsauth.GenerateRouteSecret(filepath.Join(dir, "route.secret"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := natsauth.GenerateAll(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	self := fmt.Sprintf("127.0.0.1:%d", ports[0])
	sc := natsauth.ServerConfig{Users: keys}
	if authorized {
		sc.Cluster = &natsauth.Cluster{Name: ClusterName, Listen: self, Routes: []string{self}, Password: secret}
	}
	text, err := sc.Text()
	if err != nil {
		t.Fatal(err)
	}
	if !authorized {
		text += fmt.Sprintf("cluster: {name: %q, listen: %q, routes: [%q]}\n", ClusterName, self, "nats-route://"+self)
	}
	conf := filepath.Join(dir, "a.conf")
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := Options{Dir: filepath.Join(dir, "a"), ServerName: "a", ConfigFile: conf}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()
	join := func(name string, port int, password string) int {
		s, err := Options{Dir: filepath.Join(dir, name), ServerName: name, ClusterName: ClusterName, ClusterPort: port,
			Routes: []string{"nats-route://" + self}, RoutePassword: password}.Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Shutdown)
		deadline := time.Now().Add(3 * time.Second)
		for a.NATS().NumRoutes() == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		return a.NATS().NumRoutes()
	}
	intruder = join("intruder", ports[1], "")
	member = join("member", ports[2], secret)
	return intruder, member
}

// TestAttackNATSRouteWithoutCredential: a NATS route carries every
// account's messages past the permission table. A server that routes to a
// generated cluster configuration without the route password is refused;
// one with it joins. The control (a cluster block without authorization)
// takes the intruder's route.
func TestAttackNATSRouteWithoutCredential(t *testing.T) {
	in, member := routeJoin(t, true)
	ctlIn, _ := routeJoin(t, false)
	fmt.Printf("ATTACK nats-route-auth: a server without the route password got %d route connections to a server of the generated cluster config (a member with it: %d); control cluster block without authorization: %d route connections\n",
		in, member-in, ctlIn)
	if in != 0 {
		t.Errorf("an unauthenticated server holds %d routes", in)
	}
	if member-in < 1 {
		t.Errorf("the member with the route password did not join (%d routes)", member)
	}
	if ctlIn == 0 {
		t.Error("control: the unauthenticated route was refused without authorization; the test cannot tell")
	}
}
