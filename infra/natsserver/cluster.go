package natsserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ClusterName is the NATS cluster name StartCluster gives its servers.
const ClusterName = "crowdlog"

// Cluster is a JetStream cluster of embedded servers on 127.0.0.1, each with
// its own store directory and fixed client and route ports, so a stopped node
// restarts under the same URL with its data.
type Cluster struct {
	// URLs are the nodes' client URLs in node order, e.g.
	// "nats://127.0.0.1:40123"; they stay valid across Stop and Restart.
	URLs []string

	mu    sync.Mutex
	opts  []Options
	nodes []*Server // nil while stopped
}

// StartCluster runs n JetStream servers named crowdlog-0 … crowdlog-(n-1) in
// cluster ClusterName on 127.0.0.1, node i storing in dir/node-i, every node
// routing to every other, and waits (up to 60 s or ctx) until the JetStream
// meta group has a leader that sees all n peers, so a stream with Replicas n
// can be placed at once. The routes authenticate with a random password
// (Options.RoutePassword) that only this process knows, so no other
// server can join. n must be ≥ 3 (a JetStream cluster keeps quorum
// with one node down only from 3 nodes on). logger (nil = silent) receives
// the servers' notices, warnings and errors. Takes a few seconds (Raft
// elections). Errors say which node failed; Shutdown is done on error.
func StartCluster(ctx context.Context, dir string, n int, logger *slog.Logger) (*Cluster, error) {
	if n < 3 {
		return nil, fmt.Errorf("natsserver: StartCluster needs n ≥ 3 nodes, got %d (use Start for one server)", n)
	}
	if dir == "" {
		return nil, errors.New("natsserver: StartCluster: dir is empty (give a directory for the nodes' JetStream stores)")
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	routes := make([]string, n)
	for i := range n {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i])
	}
	var secret [24]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return nil, fmt.Errorf("natsserver: route password: %w", err)
	}
	password := hex.EncodeToString(secret[:])
	c := &Cluster{opts: make([]Options, n), nodes: make([]*Server, n), URLs: make([]string, n)}
	for i := range n {
		o := Options{Dir: filepath.Join(dir, fmt.Sprintf("node-%d", i)), Port: ports[i],
			ServerName: fmt.Sprintf("crowdlog-%d", i), ClusterName: ClusterName,
			ClusterPort: ports[n+i], Routes: routes, RoutePassword: password, Logger: nodeLogger(logger, i)}
		s, err := o.Start(ctx)
		if err != nil {
			c.Shutdown()
			return nil, fmt.Errorf("natsserver: cluster node %d: %w", i, err)
		}
		c.opts[i], c.nodes[i] = o, s
		c.URLs[i] = s.URL
	}
	if err := c.waitPeers(ctx, 60*time.Second); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// URL returns the client URLs joined by commas, the seed list nats.Connect
// (and every crowdlog --nats flag) accepts.
func (c *Cluster) URL() string { return strings.Join(c.URLs, ",") }

// Node returns node i's server, or nil while it is stopped.
func (c *Cluster) Node(i int) *Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Stop shuts node i down (its clients reconnect to the other nodes; its
// store stays in its directory). Stopping a stopped node does nothing.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	s := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	s.Shutdown()
}

// Restart starts a stopped node i again on its ports and directory and waits
// (up to 60 s or ctx) until the meta leader sees all nodes again. Restarting
// a running node is an error.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	c.mu.Lock()
	running := c.nodes[i] != nil
	o := c.opts[i]
	c.mu.Unlock()
	if running {
		return fmt.Errorf("natsserver: cluster node %d is running (Stop it first)", i)
	}
	s, err := o.Start(ctx)
	if err != nil {
		return fmt.Errorf("natsserver: restart cluster node %d: %w", i, err)
	}
	c.mu.Lock()
	c.nodes[i] = s
	c.mu.Unlock()
	return c.waitPeers(ctx, 60*time.Second)
}

// Shutdown stops every node. Safe to call more than once.
func (c *Cluster) Shutdown() {
	for i := range c.nodes {
		c.Stop(i)
	}
}

// waitPeers waits until some running node is the JetStream meta leader and
// reports every node as an online JetStream peer, and every running node's
// meta state is current.
func (c *Cluster) waitPeers(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c.mu.Lock()
		nodes := append([]*Server(nil), c.nodes...)
		c.mu.Unlock()
		leader, current := false, true
		for _, s := range nodes {
			if s == nil {
				continue
			}
			if s.srv.JetStreamIsLeader() && len(s.srv.JetStreamClusterPeers()) == len(nodes) {
				leader = true
			}
			current = current && s.srv.JetStreamIsCurrent()
		}
		if leader && current {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("natsserver: cluster not ready: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("natsserver: JetStream cluster of %d nodes has no leader seeing all peers after %v (ports blocked? see the server log)", len(nodes), timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1 (listened on and
// released; another process could take one before the server does, which
// then fails to start with "port in use").
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("natsserver: find a free port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// nodeLogger tags logger's records with the node number.
func nodeLogger(logger *slog.Logger, i int) *slog.Logger {
	if logger == nil {
		return nil
	}
	return logger.With("nats_node", i)
}
