// Package natsserver starts an embedded NATS server with JetStream for
// one-machine use (relays talk NATS; `crowdlog run` and the
// tests start the broker in-process when no address is given).
//
// StartCluster runs several such servers as one JetStream cluster on
// loopback (routes between all of them), for the chaos test and one-machine
// trials of replicated streams.
//
// Production deployments point the same code at a real NATS cluster; nothing
// here is needed there.
package natsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/crowdlog/crowdlog/infra/natsauth"
)

// Options configure an embedded server. The zero value (plus Dir) is a
// JetStream-enabled server on 127.0.0.1 with a random port and no logging.
type Options struct {
	// Dir is the JetStream store directory (created if missing). Required:
	// streams and consumers persist there, and a new server on the same
	// Dir restores them.
	Dir string
	// Host to listen on; "" means 127.0.0.1.
	Host string
	// Port to listen on; 0 picks a free random port.
	Port int
	// Logger, when set, receives the server's notices, warnings and errors
	// (debug and trace are dropped). nil means no logging at all.
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for the server to accept connections;
	// 0 means 10 s.
	ReadyTimeout time.Duration
	// MaxPayload is the largest message the server accepts, in bytes;
	// 0 means the ConfigFile's max_payload, or natsauth.DefaultMaxPayload
	// (2 MiB) without one: the largest onion layer exceeds nats-server's
	// default of 1 MiB.
	MaxPayload int32
	// AuthTimeout is how long a new connection has to authenticate
	// (nats-server's auth_timeout); 0 means the ConfigFile's, or
	// nats-server's default (2 s; with TLS the TLS timeout plus 1 s). A
	// test opening hundreds of connections on a loaded machine raises it.
	AuthTimeout time.Duration

	// ServerName names the server; "" means "crowdlog-embedded". The
	// servers of a cluster need distinct names (JetStream peers are
	// identified by them).
	ServerName string
	// ClusterName, when set, makes the server a member of a JetStream
	// cluster of that name, listening for routes on ClusterPort and
	// soliciting Routes. A JetStream cluster needs all three.
	ClusterName string
	// ClusterPort is the route port on Host; 0 with a ClusterName picks a
	// free random port.
	ClusterPort int
	// Routes are the route URLs of the cluster's servers
	// ("nats-route://127.0.0.1:PORT"); listing the server itself is fine.
	Routes []string
	// RoutePassword, when set, makes the server accept only routes that
	// authenticate as natsauth.RouteUser with it, and its own routes
	// present it (a route is not subject to any permission). StartCluster
	// always sets one.
	RoutePassword string

	// ConfigFile, when set, is a nats-server configuration file (as
	// infra/natsauth's ServerConfig.Text writes: accounts, NKey users and
	// their permissions, TLS) that the server starts from; the fields
	// above still set the name, host, port, store and payload limit.
	ConfigFile string
}

// Server is a running embedded NATS server.
type Server struct {
	// URL is the client URL, e.g. "nats://127.0.0.1:40123".
	URL string
	// Port is the TCP port the server listens on.
	Port int

	srv *server.Server
}

// Start runs an embedded JetStream server storing in dir on 127.0.0.1 with a
// random port and no logging; see Options.Start. Ready in ~30 ms.
func Start(ctx context.Context, dir string) (*Server, error) {
	return Options{Dir: dir}.Start(ctx)
}

// Start runs the embedded server described by o and waits until it accepts
// connections, ctx ends, or ReadyTimeout passes. Errors name the cause (port
// in use, unwritable Dir) and what to change.
func (o Options) Start(ctx context.Context) (*Server, error) {
	if o.Dir == "" {
		return nil, errors.New("natsserver: Options.Dir is empty (give a directory for the JetStream store)")
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("natsserver: create store dir: %w", err)
	}
	host := o.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := o.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	name := o.ServerName
	if name == "" {
		name = "crowdlog-embedded"
	}
	opts := &server.Options{}
	if o.ConfigFile != "" {
		var err error
		if opts, err = server.ProcessConfigFile(o.ConfigFile); err != nil {
			return nil, fmt.Errorf("natsserver: config file %s (regenerate it with crowdlog nats-config): %w", o.ConfigFile, err)
		}
	}
	opts.ServerName, opts.Host, opts.Port = name, host, port
	opts.JetStream, opts.StoreDir, opts.NoSigs, opts.NoLog = true, o.Dir, true, o.Logger == nil
	if o.MaxPayload != 0 {
		opts.MaxPayload = o.MaxPayload
	} else if opts.MaxPayload == 0 {
		opts.MaxPayload = natsauth.DefaultMaxPayload
	}
	if o.AuthTimeout > 0 {
		opts.AuthTimeout = o.AuthTimeout.Seconds()
	}
	if o.ClusterName != "" {
		opts.Cluster.Name = o.ClusterName
		opts.Cluster.Host = host
		opts.Cluster.Port = o.ClusterPort
		if opts.Cluster.Port == 0 {
			opts.Cluster.Port = server.RANDOM_PORT
		}
		if o.RoutePassword != "" {
			opts.Cluster.Username, opts.Cluster.Password = natsauth.RouteUser, o.RoutePassword
		}
		for _, r := range o.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("natsserver: route %q: %w (want nats-route://host:port)", r, err)
			}
			if o.RoutePassword != "" && u.User == nil {
				u.User = url.UserPassword(natsauth.RouteUser, o.RoutePassword)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsserver: configure: %w", err)
	}
	if o.Logger != nil {
		srv.SetLoggerV2(slogAdapter{o.Logger}, false, false, false)
	}
	go srv.Start()

	timeout := o.ReadyTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	deadline := time.Now().Add(timeout)
	for !srv.ReadyForConnections(5 * time.Millisecond) {
		if err := ctx.Err(); err != nil {
			srv.Shutdown()
			return nil, fmt.Errorf("natsserver: start: %w", err)
		}
		if time.Now().After(deadline) {
			srv.Shutdown()
			return nil, fmt.Errorf("natsserver: not ready for connections on %s:%d after %v (port in use? store dir %s writable?)", host, o.Port, timeout, o.Dir)
		}
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		return nil, fmt.Errorf("natsserver: JetStream did not start (is %s writable and not used by another server?)", o.Dir)
	}
	s := &Server{URL: srv.ClientURL(), srv: srv}
	if tcp, ok := srv.Addr().(*net.TCPAddr); ok {
		s.Port = tcp.Port
	}
	return s, nil
}

// Shutdown stops the server and waits until it has stopped; JetStream data
// stays in Dir. Safe to call more than once.
func (s *Server) Shutdown() {
	if s == nil || s.srv == nil {
		return
	}
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}

// NATS returns the underlying nats-server, for monitoring or tests.
func (s *Server) NATS() *server.Server { return s.srv }

// slogAdapter routes nats-server logs to slog.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Noticef(format string, v ...any) { a.l.Info(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Fatalf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Errorf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Debugf(format string, v ...any)  {}
func (a slogAdapter) Tracef(format string, v ...any)  {}
