// Package clickhouse starts a real, private ClickHouse server for one machine:
// the test harness and `crowdlog run` use it when no ClickHouse address is
// given. The server runs as a child process of the caller (never --daemon),
// in its own process group, with every file it writes (config, data, logs)
// under one directory, listening on 127.0.0.1 only, on free ports.
//
// It works with the Debian package (ClickHouse 18.16, binaries
// clickhouse-server and clickhouse-client) and with current ClickHouse
// releases (single `clickhouse` binary with `server` / `client` sub-commands).
// Running as root works: the data directory is created by the same user that
// runs the server.
package clickhouse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/crowdlog/crowdlog/infra/atomicfile"
)

// InstallCommand is the command that installs the ClickHouse binaries on
// Debian; errors about a missing binary name it.
const InstallCommand = "apt-get install -y clickhouse-server clickhouse-client"

// ErrNotInstalled is wrapped by the errors of Start, ServerBinary and
// ClientBinary when no ClickHouse binary is found. Test with errors.Is.
var ErrNotInstalled = errors.New("clickhouse is not installed")

// DefaultStartTimeout bounds Start when ctx has no deadline.
const DefaultStartTimeout = 60 * time.Second

// StopGrace is how long Stop waits after SIGTERM before it sends SIGKILL.
const StopGrace = 5 * time.Second

// extraDirs are searched after $PATH: /usr/sbin is often not on the PATH of
// unprivileged users, and the Debian package puts clickhouse-server there.
var extraDirs = []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"}

// lookPath finds name on $PATH or in extraDirs; it returns "" when absent.
func lookPath(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, d := range extraDirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// binary returns the argv prefix for a ClickHouse tool: the dedicated binary
// (clickhouse-server / clickhouse-client) when present, else the combined
// `clickhouse` binary with the sub-command.
func binary(sub string) ([]string, error) {
	if p := lookPath("clickhouse-" + sub); p != "" {
		return []string{p}, nil
	}
	if p := lookPath("clickhouse"); p != "" {
		return []string{p, sub}, nil
	}
	return nil, fmt.Errorf("neither clickhouse-%s nor clickhouse found on $PATH or in %s: install it with `%s`: %w",
		sub, strings.Join(extraDirs, ", "), InstallCommand, ErrNotInstalled)
}

// ServerBinary returns the argv prefix that runs the ClickHouse server, e.g.
// ["/usr/sbin/clickhouse-server"] or ["/usr/bin/clickhouse", "server"].
// The error wraps ErrNotInstalled and names InstallCommand.
func ServerBinary() ([]string, error) { return binary("server") }

// ClientBinary returns the argv prefix that runs the ClickHouse command-line
// client, e.g. ["/usr/bin/clickhouse-client"] or ["/usr/bin/clickhouse",
// "client"]; append flags such as "--port", "9000", "--query", "SELECT 1".
// The error wraps ErrNotInstalled and names InstallCommand.
func ClientBinary() ([]string, error) { return binary("client") }

// Server is a running private ClickHouse server started by Start.
type Server struct {
	// TCPAddr is the native-protocol address "127.0.0.1:PORT" (clickhouse-go, clickhouse-client --port).
	TCPAddr string
	// HTTPAddr is the HTTP interface address "127.0.0.1:PORT" (/ping, curl).
	HTTPAddr string
	// Dir is the directory holding config.xml, users.xml, data/, logs/.
	Dir string
	// LogPath is the file that receives the server's stdout and stderr.
	LogPath string

	cmd      *exec.Cmd
	done     chan struct{} // closed when the child has exited
	waitErr  error         // the child's exit status; valid after done is closed
	stopOnce sync.Once
	stopErr  error
	logFile  *os.File
}

// Start writes config.xml and users.xml into dir (created if needed; data
// from an earlier run in the same dir is kept), picks free TCP and HTTP ports
// on 127.0.0.1, starts the server as a child process in its own process
// group, and waits until http://HTTPAddr/ping answers "Ok.".
//
// The wait is bounded by ctx (DefaultStartTimeout when ctx has no deadline).
// On failure the child is stopped and the error carries the tail of the
// server log. When no binary is found the error wraps ErrNotInstalled and
// names InstallCommand. Call Stop when done; the server is not a daemon.
func Start(ctx context.Context, dir string) (*Server, error) {
	argv, err := ServerBinary()
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStartTimeout)
		defer cancel()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: resolve dir %q: %w", dir, err)
	}
	for _, sub := range []string{"data", "tmp", "user_files", "format_schemas", "logs"} {
		if err := os.MkdirAll(filepath.Join(abs, sub), 0o755); err != nil {
			return nil, fmt.Errorf("clickhouse: create %s under %s (is the directory writable?): %w", sub, abs, err)
		}
	}
	// The ports are picked by listening on :0 and closing again, so another
	// process may take them before the server binds; retry with new ports.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ports, err := freePorts(2)
		if err != nil {
			return nil, err
		}
		s, err := startOnce(ctx, argv, abs, ports[0], ports[1])
		if err == nil {
			return s, nil
		}
		lastErr = err
		if !errors.Is(err, errAddrInUse) || ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

var errAddrInUse = errors.New("address already in use")

// RestartAttempts and RestartWait bound how long Restart waits for the old
// server's ports to become free again.
const (
	RestartAttempts = 20
	RestartWait     = 500 * time.Millisecond
)

// Restart stops s if it still runs (as Stop does) and starts a new server in
// the same Dir on the same TCP and HTTP ports, keeping its data, so clients
// configured with s.TCPAddr reconnect to it (fault tests: a ClickHouse
// outage followed by its return). It waits like Start (bounded by ctx,
// DefaultStartTimeout when ctx has no deadline) and retries while a port is
// still in use (up to RestartAttempts, RestartWait apart). s stays stopped;
// use the returned Server from then on and Stop it when done. Errors: as
// Start's, or the ports could not be bound again (another process took
// them: restart with Start on new ports instead).
func (s *Server) Restart(ctx context.Context) (*Server, error) {
	argv, err := ServerBinary()
	if err != nil {
		return nil, err
	}
	_ = s.Stop() // an earlier crash is what a restart is for
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStartTimeout)
		defer cancel()
	}
	tcpPort, err := port(s.TCPAddr)
	if err != nil {
		return nil, err
	}
	httpPort, err := port(s.HTTPAddr)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < RestartAttempts; attempt++ {
		n, err := startOnce(ctx, argv, s.Dir, tcpPort, httpPort)
		if err == nil {
			return n, nil
		}
		lastErr = err
		if !errors.Is(err, errAddrInUse) || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(RestartWait):
		case <-ctx.Done():
			return nil, fmt.Errorf("clickhouse: restart on ports %d/%d: %w (last: %w)", tcpPort, httpPort, ctx.Err(), lastErr)
		}
	}
	return nil, fmt.Errorf("clickhouse: restart on ports %d/%d: %w", tcpPort, httpPort, lastErr)
}

// port returns the port number of a "host:port" address.
func port(addr string) (int, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("clickhouse: address %q: %w", addr, err)
	}
	return strconv.Atoi(p)
}

func startOnce(ctx context.Context, argv []string, dir string, tcpPort, httpPort int) (*Server, error) {
	cfgPath := filepath.Join(dir, "config.xml")
	if err := atomicfile.WriteFile(cfgPath, []byte(configXML(dir, tcpPort, httpPort)), 0o644); err != nil {
		return nil, fmt.Errorf("clickhouse: write %s: %w", cfgPath, err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "users.xml"), []byte(usersXML), 0o644); err != nil {
		return nil, fmt.Errorf("clickhouse: write users.xml in %s: %w", dir, err)
	}
	logPath := filepath.Join(dir, "logs", "stdout.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: open %s: %w", logPath, err)
	}
	fmt.Fprintf(logFile, "\n==== crowdlog: starting %s at %s (tcp %d, http %d) ====\n",
		strings.Join(argv, " "), time.Now().UTC().Format(time.RFC3339), tcpPort, httpPort)

	args := append(append([]string{}, argv[1:]...), "--config-file="+cfgPath)
	cmd := exec.Command(argv[0], args...)
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Newer releases may fork a watchdog parent; keep one process we can signal.
	cmd.Env = append(os.Environ(), "CLICKHOUSE_WATCHDOG_ENABLE=0")
	cmd.SysProcAttr = sysProcAttr()
	s := &Server{
		TCPAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(tcpPort)),
		HTTPAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort)),
		Dir:      dir,
		LogPath:  logPath,
		cmd:      cmd,
		done:     make(chan struct{}),
		logFile:  logFile,
	}
	// Start and wait on one locked OS thread: Pdeathsig (Linux) fires when
	// the thread that forked the child exits, so that thread must live as
	// long as the child does.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		s.waitErr = cmd.Wait()
		logFile.Close()
		close(s.done)
	}()
	if err := <-started; err != nil {
		logFile.Close()
		return nil, fmt.Errorf("clickhouse: start %s: %w", argv[0], err)
	}
	if err := s.waitReady(ctx); err != nil {
		_ = s.Stop()
		tail := s.logTail(4096)
		if strings.Contains(tail, "Address already in use") {
			err = fmt.Errorf("%w (%w)", err, errAddrInUse)
		}
		return nil, fmt.Errorf("%w; tail of %s and %s:\n%s", err, logPath,
			filepath.Join(dir, "logs", "clickhouse-server.err.log"), tail)
	}
	return s, nil
}

// waitReady polls /ping until it answers "Ok.", the child exits or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second}
	url := "http://" + s.HTTPAddr + "/ping"
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("clickhouse: build ping request: %w", err)
		}
		if resp, err := client.Do(req); err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.TrimSpace(string(body)) == "Ok." {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("clickhouse: server exited before answering %s: %v", url, s.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("clickhouse: server did not answer %s in time (raise the context deadline or read the log): %w", url, ctx.Err())
		case <-tick.C:
		}
	}
}

// logTail returns up to n bytes from the end of the stdout log and of the
// server's error log, for error messages.
func (s *Server) logTail(n int64) string {
	var b bytes.Buffer
	for _, p := range []string{s.LogPath, filepath.Join(s.Dir, "logs", "clickhouse-server.err.log")} {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		if st, err := f.Stat(); err == nil && st.Size() > n {
			_, _ = f.Seek(st.Size()-n, io.SeekStart)
		}
		data, _ := io.ReadAll(f)
		f.Close()
		fmt.Fprintf(&b, "--- %s ---\n%s\n", filepath.Base(p), data)
	}
	return b.String()
}

// Done returns a channel that is closed when the server process has exited
// (after Stop, or on its own).
func (s *Server) Done() <-chan struct{} { return s.done }

// Stop sends SIGTERM to the server's process group, waits up to StopGrace,
// then sends SIGKILL and waits for the exit. It is safe to call more than
// once and concurrently; every call returns the same result. An exit caused
// by the signals is not an error; an earlier crash of the server is.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		select {
		case <-s.done:
			// Exited on its own before Stop: report how.
			if s.waitErr != nil {
				s.stopErr = fmt.Errorf("clickhouse: server had already exited: %w", s.waitErr)
			}
			return
		default:
		}
		_ = signalGroup(s.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(StopGrace):
			_ = signalGroup(s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	})
	return s.stopErr
}

// freePorts returns n distinct free TCP ports on 127.0.0.1, found by
// listening on port 0 (all listeners are held until every port is picked).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("clickhouse: pick a free port on 127.0.0.1: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// configXML renders a minimal server config valid for 18.16 and current
// releases (root element <yandex>, still accepted by new versions).
func configXML(dir string, tcpPort, httpPort int) string {
	p := func(sub string) string { return xmlEscape(filepath.Join(dir, sub)) + "/" }
	return fmt.Sprintf(`<?xml version="1.0"?>
<!-- Written by crowdlog infra/clickhouse; rewritten on every start. -->
<yandex>
    <logger>
        <level>information</level>
        <log>%[1]slogs/clickhouse-server.log</log>
        <errorlog>%[1]slogs/clickhouse-server.err.log</errorlog>
        <size>100M</size>
        <count>3</count>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>%[2]d</tcp_port>
    <http_port>%[3]d</http_port>
    <max_connections>1024</max_connections>
    <keep_alive_timeout>3</keep_alive_timeout>
    <max_concurrent_queries>100</max_concurrent_queries>
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
    <mark_cache_size>268435456</mark_cache_size>
    <path>%[4]s</path>
    <tmp_path>%[5]s</tmp_path>
    <user_files_path>%[6]s</user_files_path>
    <format_schema_path>%[7]s</format_schema_path>
    <users_config>%[8]s</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mlock_executable>false</mlock_executable>
    <umask>022</umask>
</yandex>
`, xmlEscape(dir)+"/", tcpPort, httpPort, p("data"), p("tmp"), p("user_files"), p("format_schemas"),
		xmlEscape(filepath.Join(dir, "users.xml")))
}

// usersXML defines the "default" user without password, reachable from
// loopback only, allowed to manage users on releases that have SQL users
// (access_management). An analyst user is added by a file in users.d
// (WriteAnalystUser), which this rewrite leaves alone.
const usersXML = `<?xml version="1.0"?>
<!-- Written by crowdlog infra/clickhouse; rewritten on every start. -->
<yandex>
    <profiles>
        <default>
            <max_memory_usage>4000000000</max_memory_usage>
            <load_balancing>random</load_balancing>
        </default>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks>
                <ip>127.0.0.1</ip>
                <ip>::1</ip>
            </networks>
            <profile>default</profile>
            <quota>default</quota>
            <!-- current releases: lets default run CREATE USER/GRANT (crowdlog clickhouse init); ignored by 18.16 -->
            <access_management>1</access_management>
        </default>
    </users>
    <quotas>
        <default>
            <interval>
                <duration>3600</duration>
                <queries>0</queries>
                <errors>0</errors>
                <result_rows>0</result_rows>
                <read_rows>0</read_rows>
                <execution_time>0</execution_time>
            </interval>
        </default>
    </quotas>
</yandex>
`

func xmlEscape(s string) string {
	var b bytes.Buffer
	for _, r := range s {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '"':
			b.WriteString("&quot;")
		case '\'':
			b.WriteString("&apos;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// WriteAddrEnv writes the server's addresses to dir/addr.env as shell
// variables (CH_TCP=host:port, CH_TCP_PORT, CH_HTTP) for scripts, and
// returns the file's text.
func (s *Server) WriteAddrEnv(dir string) (string, error) {
	_, p, err := net.SplitHostPort(s.TCPAddr)
	if err != nil {
		return "", fmt.Errorf("clickhouse: TCP address %q: %w", s.TCPAddr, err)
	}
	env := fmt.Sprintf("CH_TCP=%s\nCH_TCP_PORT=%s\nCH_HTTP=%s\n", s.TCPAddr, p, s.HTTPAddr)
	return env, atomicfile.WriteFile(filepath.Join(dir, "addr.env"), []byte(env), 0o644)
}

// ReadAddrEnv reads dir/addr.env as written by WriteAddrEnv (a running
// `crowdlog clickhouse --dir dir`) and returns its native-protocol address
// (CH_TCP). Errors when the file is missing (is the server running?) or
// has no CH_TCP line.
func ReadAddrEnv(dir string) (string, error) {
	path := filepath.Join(dir, "addr.env")
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("clickhouse: read %s (start the server with `crowdlog clickhouse --dir %s` first): %w", path, dir, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "CH_TCP="); ok && v != "" {
			return v, nil
		}
	}
	return "", fmt.Errorf("clickhouse: %s has no CH_TCP= line", path)
}
