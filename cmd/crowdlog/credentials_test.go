package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/tlstest"
	"github.com/crowdlog/crowdlog/protocol"
)

// TestKafkaCredentialFlags: on a kfake broker with TLS, SASL and ACLs on
// (users without ACLs), `crowdlog topics` with the admin's credential from
// flags and CROWDLOG_KAFKA_SASL_PASSWORD_FILE creates the topics and the
// role ACLs (--acl); then `crowdlog aggregate open-epoch` writes its
// control records with the operator's credential and is refused with the
// release's and the aggregator's (no scheduler role), and the password
// appears in no output.
func TestKafkaCredentialFlags(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	srvTLS, caFile := tlstest.TLS(t, dir)
	admin := kafka.Credential{Mechanism: kafka.MechanismSCRAMSHA512, User: "admin", Password: "admin-pw-31"}
	agg := kafka.Credential{Mechanism: kafka.MechanismSCRAMSHA512, User: "agg", Password: "agg-pw-77"}
	rel := kafka.Credential{Mechanism: kafka.MechanismSCRAMSHA512, User: "rel", Password: "rel-pw-53"}
	op := kafka.Credential{Mechanism: kafka.MechanismSCRAMSHA512, User: "op", Password: "op-pw-19"}
	b, err := kafka.Config{Dir: filepath.Join(dir, "k"), Partitions: 2, TLS: srvTLS, Admin: &admin, ACLs: true,
		Users: []kafka.User{{Credential: agg}, {Credential: rel}, {Credential: op}}}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	run := func(c kafka.Credential, args ...string) (string, error) {
		pw := filepath.Join(t.TempDir(), "pw")
		if err := os.WriteFile(pw, []byte(c.Password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("CROWDLOG_KAFKA_SASL_PASSWORD_FILE", pw)
		var out bytes.Buffer
		root := rootCmd()
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append(args, "--kafka", b.Addr, "--kafka-tls-ca", caFile, "--kafka-sasl-mechanism", "scram-sha-512", "--kafka-sasl-user", c.User))
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		defer rcancel()
		err := root.ExecuteContext(rctx)
		if strings.Contains(out.String(), c.Password) || (err != nil && strings.Contains(err.Error(), c.Password)) {
			t.Errorf("%v: the output or error shows the password", args)
		}
		return out.String(), err
	}
	out, err := run(admin, "topics", "--partitions", "2", "--acl", "aggregator=agg,release=rel,operator=op")
	if err != nil {
		t.Fatalf("topics as admin: %v\n%s", err, out)
	}
	if !strings.Contains(out, "acl User:agg: allow Write on Topic decrypted") || !strings.Contains(out, "acl User:rel: allow Read on Topic decrypted") {
		t.Fatalf("topics output lacks the ACLs:\n%s", out)
	}
	if !strings.Contains(out, "acl User:op: allow Write on Topic reports") || strings.Contains(out, "acl User:agg: allow Write on Topic reports") {
		t.Fatalf("topics output: want Write on reports for the operator only:\n%s", out)
	}
	if out, err := run(op, "aggregate", "open-epoch", "--epoch", "2026-11"); err != nil {
		t.Fatalf("open-epoch as the operator: %v\n%s", err, out)
	}
	for who, c := range map[string]kafka.Credential{"release": rel, "aggregator": agg} {
		if _, err := run(c, "aggregate", "open-epoch", "--epoch", "2026-12"); err == nil {
			t.Fatalf("open-epoch as the %s wrote control records to reports", who)
		}
	}
	if _, err := run(agg, "topics", "--acl", "release=agg"); err == nil {
		t.Fatal("the aggregator created ACLs")
	}
	if _, err := run(admin, "topics", "--acl", "analyst=x"); err == nil || !strings.Contains(err.Error(), "want ROLE=USER") {
		t.Fatalf("--acl analyst=x: %v", err)
	}
	// the records the operator's open-epoch wrote, read as the admin
	a, err := admin.AuthConfig(caFile).Load()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := kafka.Partitions(kafka.WithAuth(ctx, a), b.Addr, protocol.ReportsTopic); err != nil || n != 2 {
		t.Fatalf("reports: %d partitions, %v", n, err)
	}
	// a plaintext client is refused by the TLS listener
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	if _, err := kafka.Partitions(pctx, b.Addr, protocol.ReportsTopic); err == nil {
		t.Fatal("a plaintext client got metadata")
	}
}

// TestLocalServicesRefuseCredentials: `run` and `pdd` without --kafka or
// --clickhouse start local services that take no credential; credentials
// given for remote ones are a usage error (exit 2) naming the flag.
func TestLocalServicesRefuseCredentials(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--input", "x.tsv", "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", "u", "--config", saslPasswordConfig(t)}, "give its --kafka"},
		{[]string{"pdd", "--kafka-tls"}, "give its --kafka"},
		{[]string{"run", "--input", "x.tsv", "--kafka", "k:9093", "--clickhouse-user", "writer"}, "give its --clickhouse"},
	} {
		root := rootCmd()
		root.SetArgs(c.args)
		root.SetOut(&bytes.Buffer{})
		err := root.ExecuteContext(context.Background())
		var ec exitCode
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &ec) || ec.code != 2 {
			t.Errorf("%v: %v; want a usage error saying %q", c.args, err, c.want)
		}
	}
}

// saslPasswordConfig is a --config file that gives --kafka-sasl-password
// (a secret: refused on the command line).
func saslPasswordConfig(t *testing.T) string {
	return writeConfig(t, "kafka-sasl-password: pw\n")
}
