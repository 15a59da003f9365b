package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// TestIssuerCmd: `crowdlog keys enroll --generate` and `crowdlog issuer`
// wired together: the enrolled identity gets its N randomness tokens and
// no more.
func TestIssuerCmd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // bounds the whole test
	defer cancel()
	srv, err := natsserver.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	keys := t.TempDir()
	idPath := filepath.Join(t.TempDir(), "id.key")
	enroll := keysCmd()
	enroll.SetArgs([]string{"enroll", "--dir", keys, "--generate", "--out", idPath})
	if err := enroll.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	id, err := keydir.LoadSigningKey(idPath)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		c := issuerCmd()
		c.SetArgs([]string{"--nats", srv.URL, "--keys", keys, "--randomness-tokens", "3", "--report-tokens", "1", "--epoch", "e1"})
		done <- c.ExecuteContext(rctx)
	}()
	defer func() {
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("issuer did not stop within 30 s")
		}
	}()
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := &tokenclient.Client{NC: nc, Identity: id, Timeout: time.Second}
	nonces := make([][32]byte, 3)
	for i := range nonces {
		rand.Read(nonces[i][:])
	}
	for { // until the issuer answers (each try bounded by Timeout, all by ctx)
		_, err = c.Tokens(ctx, token.KindRandomness, "e1", nonces)
		if err == nil || !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, context.DeadlineExceeded) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("issuer exited: %v", err)
		case <-ctx.Done():
			t.Fatal("issuer did not answer within the test's deadline")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Tokens(ctx, token.KindRandomness, "e1", nonces[:1]); !errors.Is(err, tokenclient.ErrBudget) {
		t.Fatalf("4th token with --randomness-tokens 3: %v", err)
	}
}

// TestIssuerRoleFlag: `crowdlog issuer --role aggregator` on a fresh
// volume marks it for the aggregator, creates only the report-token and ARC
// keys of the epoch, needs only --report-tokens and answers a client's
// report tokens; the same volume is then refused with --role randomness.
// `keys enroll` takes several public key files at once.
func TestIssuerRoleFlag(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := natsserver.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	attester, vol, ids := t.TempDir(), t.TempDir(), t.TempDir()
	gen := keysCmd()
	gen.SetArgs([]string{"generate", "--role", keydir.RoleAttester, "--keys", attester})
	if err := gen.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	var pubs []string
	var id0 []byte
	for i := range 3 {
		p := filepath.Join(ids, fmt.Sprintf("id%d.key", i))
		k, err := keydir.EnsureIdentityKey(p)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			id0 = k
		}
		pubs = append(pubs, p+".pub")
	}
	enroll := keysCmd()
	enroll.SetArgs(append([]string{"enroll", "--keys", attester}, pubs...))
	if err := enroll.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	list, err := keydir.LoadEnrollment(attester)
	if err != nil || len(list) != 3 {
		t.Fatalf("enrollment list after enrolling 3 files: %d keys, %v", len(list), err)
	}
	b, err := os.ReadFile(keydir.EnrollmentPath(attester))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keydir.EnrollmentPath(vol), b, 0o644); err != nil {
		t.Fatal(err)
	}

	// both operators' issuers, each on its own volume with the attester's list
	rvol := t.TempDir()
	if err := os.WriteFile(keydir.EnrollmentPath(rvol), b, 0o644); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	for _, args := range [][]string{
		{"--keys", vol, "--role", keydir.RoleAggregator, "--report-tokens", "2"},
		{"--keys", rvol, "--role", keydir.RoleRandomness, "--randomness-tokens", "2"},
	} {
		go func() {
			c := issuerCmd()
			c.SetArgs(append([]string{"--nats", srv.URL, "--epoch", "e1"}, args...))
			done <- c.ExecuteContext(rctx)
		}()
	}
	defer func() {
		stop()
		for range 2 {
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("issuer did not stop within 30 s")
			}
		}
	}()
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := &tokenclient.Client{NC: nc, Identity: id0, Timeout: time.Second}
	nonces := make([][32]byte, 2)
	for i := range nonces {
		rand.Read(nonces[i][:])
	}
	for { // until the issuer answers (each try bounded by Timeout, all by ctx)
		_, err = c.Tokens(ctx, token.KindReport, "e1", nonces)
		if err == nil || !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, context.DeadlineExceeded) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("issuer exited: %v", err)
		case <-ctx.Done():
			t.Fatal("issuer did not answer within the test's deadline")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err != nil {
		t.Fatalf("report tokens from the aggregator's issuer: %v", err)
	}
	if _, err := c.Tokens(ctx, token.KindRandomness, "e1", nonces); err != nil {
		t.Fatalf("randomness tokens from the randomness operator's issuer: %v", err)
	}
	if role, err := keydir.DirRole(rvol); err != nil || role != keydir.RoleRandomness {
		t.Fatalf("randomness volume marked %q (%v), want %s", role, err, keydir.RoleRandomness)
	}
	if _, err := os.Stat(keydir.TokenKeyPath(rvol, token.KindReport, "e1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the randomness operator's issuer created a report-token key: %v", err)
	}
	if role, err := keydir.DirRole(vol); err != nil || role != keydir.RoleAggregator {
		t.Fatalf("volume marked %q (%v), want %s", role, err, keydir.RoleAggregator)
	}
	if _, err := os.Stat(keydir.TokenKeyPath(vol, token.KindReport, "e1")); err != nil {
		t.Errorf("report-token key of e1: %v", err)
	}
	if _, err := os.Stat(keydir.ARCKeyPath(vol, "e1")); err != nil {
		t.Errorf("ARC key of e1: %v", err)
	}
	if _, err := os.Stat(keydir.TokenKeyPath(vol, token.KindRandomness, "e1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the aggregator's issuer created a randomness-token key: %v", err)
	}

	other := issuerCmd()
	other.SetArgs([]string{"--nats", srv.URL, "--keys", vol, "--role", keydir.RoleRandomness, "--randomness-tokens", "2"})
	if err := other.ExecuteContext(ctx); !errors.Is(err, keydir.ErrNotCustodian) {
		t.Errorf("--role randomness on the aggregator's volume: %v, want ErrNotCustodian", err)
	}
	fresh := issuerCmd()
	fresh.SetArgs([]string{"--nats", srv.URL, "--keys", t.TempDir(), "--role", keydir.RoleRandomness, "--report-tokens", "2"})
	if err := fresh.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "--randomness-tokens") {
		t.Errorf("--role randomness without --randomness-tokens: %v, want an error naming --randomness-tokens", err)
	}
}
