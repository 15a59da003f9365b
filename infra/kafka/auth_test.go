package kafka

import (
	"context"
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/infra/tlstest"
	"github.com/crowdlog/crowdlog/protocol"
)

// testTLS is tlstest.TLS.
func testTLS(t *testing.T, dir string) (*tls.Config, string) { return tlstest.TLS(t, dir) }

// secureCluster is a kfake broker with TLS, SASL and (acls) the ACL
// table on, its users and the CA file clients verify it with.
type secureCluster struct {
	b      *Broker
	caFile string
	admin  Credential
	users  map[string]Credential // by name: relay, aggregator, release, client
}

func startSecure(t *testing.T, ctx context.Context, acls bool) *secureCluster {
	t.Helper()
	dir := t.TempDir()
	srvTLS, caFile := testTLS(t, dir)
	sc := &secureCluster{caFile: caFile, admin: Credential{MechanismSCRAMSHA512, "admin", "admin-secret"},
		users: map[string]Credential{
			"relay":      {MechanismSCRAMSHA512, "relay-b", "relay-secret"},
			"aggregator": {MechanismSCRAMSHA512, "aggregator", "aggregator-secret"},
			"release":    {MechanismPLAIN, "release", "release-secret"},
			// a client's credential (clients have no Kafka role): no ACLs
			"client": {MechanismSCRAMSHA256, "client-7", "client-secret"},
		}}
	cfg := Config{Dir: filepath.Join(dir, "kafka"), Partitions: 2, TLS: srvTLS, Admin: &sc.admin, ACLs: acls,
		Users: []User{{RoleRelay, sc.users["relay"]}, {RoleAggregator, sc.users["aggregator"]},
			{RoleRelease, sc.users["release"]}, {"", sc.users["client"]}}}
	b, err := cfg.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	sc.b = b
	admin := sc.ctx(t, ctx, sc.admin)
	if err := EnsureTopics(admin, b.Addr, 2, protocol.ReportsTopic, protocol.DecryptedTopic); err != nil {
		t.Fatal(err)
	}
	return sc
}

// ctx returns ctx carrying c's Auth (TLS verified by the cluster's CA).
func (sc *secureCluster) ctx(t *testing.T, ctx context.Context, c Credential) context.Context {
	t.Helper()
	a, err := c.AuthConfig(sc.caFile).Load()
	if err != nil {
		t.Fatal(err)
	}
	return WithAuth(ctx, a)
}

func TestSecureBrokerRoles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sc := startSecure(t, ctx, true)
	relay := sc.ctx(t, ctx, sc.users["relay"])
	agg := sc.ctx(t, ctx, sc.users["aggregator"])
	rel := sc.ctx(t, ctx, sc.users["release"])

	// relay b produces reports
	if err := produce(relay, sc.b.Addr, protocol.ReportsTopic, kafkago.Message{Key: []byte("k"), Value: []byte("sealed")}); err != nil {
		t.Fatalf("relay b writes reports: %v", err)
	}
	// the aggregator reads them in its consumer group and writes decrypted
	gctx, gcancel := context.WithTimeout(agg, 30*time.Second)
	got := make(chan []byte, 1)
	done := make(chan error, 1)
	go func() {
		done <- ServeGroup(gctx, []string{sc.b.Addr}, "crowdlog-aggregator", protocol.ReportsTopic, 6*time.Second, slog.New(slog.DiscardHandler), "aggregator",
			func(ctx context.Context, gen *kafkago.Generation, p int, from int64) error {
				return Forward([]string{sc.b.Addr}, protocol.ReportsTopic, got, slog.New(slog.DiscardHandler))(ctx, gen, p, from)
			})
	}()
	select {
	case v := <-got:
		if string(v) != "sealed" {
			t.Fatalf("aggregator read %q", v)
		}
	case <-gctx.Done():
		t.Fatal("the aggregator read nothing from reports in its consumer group within 30 s")
	}
	gcancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := produce(agg, sc.b.Addr, protocol.DecryptedTopic, kafkago.Message{Value: []byte("item")}); err != nil {
		t.Fatalf("aggregator writes decrypted: %v", err)
	}
	// epoch control records on reports (OpenEpoch) are the operator's, or
	// a scheduling aggregator's (RoleScheduler): not this aggregator's
	if err := produce(agg, sc.b.Addr, protocol.ReportsTopic, kafkago.Message{Value: []byte("control")}); err == nil {
		t.Fatal("the aggregator without the scheduler role wrote to reports")
	}
	// the release (SASL PLAIN over TLS) reads decrypted with ReadTopic
	tail := ReadTopic(rel, []string{sc.b.Addr}, protocol.DecryptedTopic, "release", slog.New(slog.DiscardHandler))
	select {
	case v := <-tail.Msgs:
		if string(v) != "item" {
			t.Fatalf("release read %q", v)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the release read nothing from decrypted within 20 s")
	}
	if err := tail.Stop(); err != nil {
		t.Fatal(err)
	}
	// ... but may not write it, nor read reports
	if err := produce(rel, sc.b.Addr, protocol.DecryptedTopic, kafkago.Message{Value: []byte("forged")}); err == nil {
		t.Error("the release wrote to decrypted")
	}
	if n, err := fetchAll(rel, sc.b.Addr, protocol.ReportsTopic, 2); err == nil || n > 0 {
		t.Errorf("the release read %d reports (err %v)", n, err)
	}

	// without TLS, without SASL, with a wrong password: no connection
	short := func(c context.Context) context.Context {
		c, cancel := context.WithTimeout(c, 5*time.Second)
		t.Cleanup(cancel)
		return c
	}
	if _, err := Partitions(short(ctx), sc.b.Addr, protocol.ReportsTopic); err == nil {
		t.Error("a plaintext client got metadata from a TLS broker")
	}
	noSASL, _ := AuthConfig{CAFile: sc.caFile}.Load()
	if _, err := Partitions(short(WithAuth(ctx, noSASL)), sc.b.Addr, protocol.ReportsTopic); err == nil {
		t.Error("a TLS client without SASL got metadata")
	}
	wrong := sc.users["relay"]
	wrong.Password = "guess"
	if _, err := Partitions(short(sc.ctx(t, ctx, wrong)), sc.b.Addr, protocol.ReportsTopic); err == nil {
		t.Error("relay b's user with a wrong password got metadata")
	}
}

// TestApplyACLs: users without seeded ACLs get exactly their role's rows
// from ApplyACLs, run as the admin (the path of a real cluster).
func TestApplyACLs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	srvTLS, caFile := testTLS(t, dir)
	admin := Credential{MechanismSCRAMSHA512, "admin", "a"}
	relay := Credential{MechanismSCRAMSHA512, "relay-b", "r"}
	release := Credential{MechanismSCRAMSHA512, "release", "s"}
	b, err := Config{Dir: filepath.Join(dir, "k"), Partitions: 1, TLS: srvTLS, Admin: &admin, ACLs: true,
		Users: []User{{"", relay}, {"", release}}}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	as := func(c Credential) context.Context {
		a, err := c.AuthConfig(caFile).Load()
		if err != nil {
			t.Fatal(err)
		}
		return WithAuth(ctx, a)
	}
	if err := EnsureTopics(as(admin), b.Addr, 1, protocol.ReportsTopic, protocol.DecryptedTopic); err != nil {
		t.Fatal(err)
	}
	if err := produce(as(relay), b.Addr, protocol.ReportsTopic, kafkago.Message{Value: []byte("x")}); err == nil {
		t.Fatal("relay b wrote reports before any ACL")
	}
	// a non-admin may not create ACLs
	if err := ApplyACLs(as(relay), b.Addr, map[Role]string{RoleRelay: relay.User}); err == nil {
		t.Fatal("relay b created its own ACLs")
	}
	for range 2 { // idempotent
		if err := ApplyACLs(as(admin), b.Addr, map[Role]string{RoleRelay: relay.User, RoleRelease: release.User}); err != nil {
			t.Fatal(err)
		}
	}
	if err := produce(as(relay), b.Addr, protocol.ReportsTopic, kafkago.Message{Value: []byte("x")}); err != nil {
		t.Fatalf("relay b after ApplyACLs: %v", err)
	}
	if err := produce(as(release), b.Addr, protocol.ReportsTopic, kafkago.Message{Value: []byte("x")}); err == nil {
		t.Fatal("the release wrote reports")
	}
	if n, err := fetchAll(as(release), b.Addr, protocol.DecryptedTopic, 1); err != nil || n != 0 {
		t.Fatalf("release reads decrypted after ApplyACLs: %d, %v", n, err)
	}
}

func TestAuthConfigLoad(t *testing.T) {
	_, caFile := testTLS(t, t.TempDir())
	for _, c := range []struct {
		cfg  AuthConfig
		want string // "" = ok; else a substring of the error
	}{
		{AuthConfig{}, ""},
		{AuthConfig{CAFile: caFile, Mechanism: "scram-sha-512", User: "u", Password: "secret-9"}, ""},
		{AuthConfig{TLS: true, Mechanism: MechanismPLAIN, User: "u", Password: "p"}, ""},
		{AuthConfig{Mechanism: MechanismPLAIN, User: "u", Password: "p"}, "turn TLS on"},
		{AuthConfig{Mechanism: MechanismSCRAMSHA512, User: "u"}, "needs a user and a password"},
		{AuthConfig{User: "u", Password: "p"}, "without a mechanism"},
		{AuthConfig{Mechanism: "GSSAPI", User: "u", Password: "p"}, "want SCRAM-SHA-512"},
		{AuthConfig{CAFile: "/nonexistent/ca.pem"}, "TLS CA file"},
		{AuthConfig{CertFile: caFile}, "give both files or neither"},
	} {
		a, err := c.cfg.Load()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: error %v, want one saying %q", c.cfg, err, c.want)
		case err == nil && c.cfg.Password != "" && strings.Contains(a.String(), c.cfg.Password):
			t.Errorf("%s shows the password", a)
		}
	}
}

// TestACLTableDocumented: docs/operations.md shows ACLTable as
// ACLTableMarkdown renders it, so the documented permissions are the
// applied ones.
func TestACLTableDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), ACLTableMarkdown()) {
		t.Fatalf("docs/operations.md (Credentials and ACLs per role) lacks the ACL table as the code has it; paste:\n%s", ACLTableMarkdown())
	}
	for _, r := range Roles {
		if len(GrantsOf(r)) == 0 {
			t.Errorf("role %s has no row in ACLTable", r)
		}
	}
}

// TestMutualTLS: a broker that requires client certificates serves a
// client with the certificate and key of AuthConfig (CertFile, KeyFile)
// and SCRAM, and refuses the same credential without the certificate.
func TestMutualTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	srvTLS, caFile := testTLS(t, dir)
	srvTLS.ClientAuth = tls.RequireAndVerifyClientCert
	admin := Credential{MechanismSCRAMSHA512, "admin", "a-pw"}
	b, err := Config{Dir: filepath.Join(dir, "k"), Partitions: 1, TLS: srvTLS, Admin: &admin}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	withCert := admin.AuthConfig(caFile)
	withCert.CertFile, withCert.KeyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	a, err := withCert.Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := EnsureTopics(WithAuth(ctx, a), b.Addr, 1, protocol.ReportsTopic); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	noCert, err := admin.AuthConfig(caFile).Load()
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	if _, err := Partitions(WithAuth(sctx, noCert), b.Addr, protocol.ReportsTopic); err == nil {
		t.Error("a client without a certificate was served")
	}
}
