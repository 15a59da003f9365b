package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// TestKeysRoleCmd: `keys generate --role` per operator, `export-public`
// and `import-public` give each operator exactly its own private keys and
// the public parts it needs; `crowdlog issuer --epoch` at the aggregator's
// and the randomness operator creates only the kinds each issues, and a
// role directory refuses another role's key.
func TestKeysRoleCmd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := t.TempDir()
	dir := func(role string) string { return filepath.Join(root, role) }
	run := func(args ...string) error {
		c := keysCmd()
		c.SetArgs(args)
		c.SetOut(os.Stderr)
		return c.ExecuteContext(ctx)
	}
	for _, role := range keydir.CustodyRoles() {
		if err := run("generate", "--keys", dir(role), "--role", role); err != nil {
			t.Fatalf("%s: %v", role, err)
		}
		if err := run("export-public", "--keys", dir(role), "--out", dir(role)+".public"); err != nil {
			t.Fatalf("%s export: %v", role, err)
		}
	}
	imports := map[string][]string{
		keydir.RoleAggregator: {keydir.RoleOperator, keydir.RoleAttester},
		keydir.RoleRandomness: {keydir.RoleAttester},
		keydir.RoleCoord:      {keydir.RoleAggregator, keydir.RoleOperator},
		keydir.RoleClient:     {keydir.RoleRelayA, keydir.RoleRelayB, keydir.RoleAggregator},
	}
	for role, from := range imports {
		args := []string{"import-public", "--keys", dir(role)}
		for _, f := range from {
			args = append(args, dir(f)+".public")
		}
		if err := run(args...); err != nil {
			t.Fatalf("%s imports %v: %v", role, from, err)
		}
	}
	for _, role := range []string{keydir.RoleAggregator, keydir.RoleRandomness} {
		if err := keydir.EnsureIssuerKeys(dir(role), "e1"); err != nil {
			t.Fatalf("%s opens e1: %v", role, err)
		}
	}
	want := map[string][]string{
		keydir.RoleAggregator: {"aggregator-sign.key", "aggregator.key", "issuer.keys/e1.arc.key", "issuer.keys/e1.report.key"},
		keydir.RoleRandomness: {"issuer.keys/e1.randomness.key"},
		keydir.RoleRelayA:     {"relay-a.key"},
		keydir.RoleOperator:   {"control-sign.key", "operator-sign.key"},
	}
	for role, w := range want {
		got, _ := keydir.PrivateFiles(dir(role))
		slices.Sort(got)
		if !slices.Equal(got, w) {
			t.Errorf("%s holds %v, want %v", role, got, w)
		}
	}
	if _, err := keydir.LoadTokenKey(dir(keydir.RoleAggregator), token.KindRandomness, "e1"); !errors.Is(err, keydir.ErrNotCustodian) {
		t.Errorf("aggregator loads a randomness-token key: %v", err)
	}
	if _, _, _, err := keydir.LoadRoute(dir(keydir.RoleClient)); err != nil {
		t.Errorf("client route: %v", err)
	}
	// services started on another operator's directory stop before they
	// create or load anything
	enroll := keysEnrollCmd()
	enroll.SetArgs([]string{"--keys", dir(keydir.RoleAggregator), "--generate", "--out", filepath.Join(root, "id.key")})
	if err := enroll.ExecuteContext(ctx); !errors.Is(err, keydir.ErrNotCustodian) {
		t.Errorf("enroll at the aggregator: %v, want ErrNotCustodian", err)
	}
	if _, err := os.Stat(filepath.Join(root, "id.key")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused enroll wrote an identity key: %v", err)
	}
	enroll = keysEnrollCmd()
	enroll.SetArgs([]string{"--keys", dir(keydir.RoleAttester), "--generate", "--out", filepath.Join(root, "id.key")})
	if err := enroll.ExecuteContext(ctx); err != nil {
		t.Errorf("enroll at the attester: %v", err)
	}
	iss := issuerCmd()
	iss.SetArgs([]string{"--keys", dir(keydir.RoleRelayA), "--randomness-tokens", "1", "--report-tokens", "1", "--nats", "nats://127.0.0.1:1"})
	if err := iss.ExecuteContext(ctx); !errors.Is(err, keydir.ErrNotCustodian) {
		t.Errorf("issuer on relay a's directory: %v, want ErrNotCustodian", err)
	}
	rnd := randomnessCmd()
	rnd.SetArgs([]string{"open-epoch", "--keys", dir(keydir.RoleAggregator), "--epoch", "e1"})
	if err := rnd.ExecuteContext(ctx); !errors.Is(err, keydir.ErrNotCustodian) {
		t.Errorf("randomness open-epoch on the aggregator's directory: %v, want ErrNotCustodian", err)
	}
	if _, err := os.Stat(filepath.Join(dir(keydir.RoleAggregator), keydir.RandomnessKeys)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the aggregator's directory got OPRF keys: %v", err)
	}
	if err := run("rotate", "--keys", dir(keydir.RoleRelayA), "--role", "relay-a"); err != nil {
		t.Errorf("relay a rotates its key: %v", err)
	}
	if err := run("generate", "--keys", dir("x"), "--role", "nobody"); err == nil {
		t.Error("unknown role accepted")
	}
}
