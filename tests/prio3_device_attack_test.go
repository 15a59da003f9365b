package tests

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// TestAttackPrio3KeySubstitution: whoever hands an app its operators' key
// files (a tampered download, a man in the middle of the first run)
// substitutes its own key for the leader's report key — and, in the
// second variant, its own signing key for the leader's too, so a forged
// settings answer would verify. A device that sealed to the substituted
// key would send uploads the attacker opens from relay b's output (Kafka
// topic prio3-uploads, which the attacker reads) and the real leader
// rejects. Three enrolled devices (examples/prio3, against the real roles
// of startPrio3Devices) try to upload per variant; the attacker then opens
// what reached the topic with its key (protocol/prio3 OpenReport). The
// device must refuse before sending: the leader's signed settings list its
// real report keys (variant 1), and the real leader's answer does not
// verify under the substituted signing key (variant 2); only the
// prio3-leader NATS credential may answer on crowdlog.prio3.settings.
func TestAttackPrio3KeySubstitution(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p := startPrio3Devices(t, ctx)
	attacker := filepath.Join(p.dir, "keys-attacker")
	p.run("keys", "generate", "--role", keydir.RolePrio3Leader, "--keys", attacker)
	kp, err := keydir.LoadKeyPairs([]string{filepath.Join(attacker, keydir.Prio3LeaderKey)})
	must(t, err)
	variant := func(name string, extra []string, substitute ...string) (uploaded, total int, refusals []string) {
		keys := filepath.Join(p.dir, "keys-"+name)
		must(t, os.MkdirAll(keys, 0o755))
		for _, f := range []string{keydir.RelayAKey + ".pub", keydir.RelayBKey + ".pub", keydir.Prio3LeaderKey + ".pub",
			keydir.Prio3HelperKey + ".pub", keydir.Prio3LeaderSignKey + ".pub"} {
			src := filepath.Join(p.public, f)
			for _, s := range substitute {
				if s == f {
					src = filepath.Join(attacker, f)
				}
			}
			copyFile(t, src, filepath.Join(keys, f))
		}
		const devices = 3
		for i := range devices {
			dev := fmt.Sprintf("%s-%d", name, i)
			p.enroll(dev)
			out, err := p.device(dev, append([]string{"--keys", keys}, extra...), "weather today", "football news")
			if err == nil {
				uploaded++
			} else {
				refusals = append(refusals, strings.TrimSpace(out))
			}
		}
		return uploaded, devices, refusals
	}
	up1, n1, ref1 := variant("report", nil, keydir.Prio3LeaderKey+".pub")
	up2, n2, ref2 := variant("report-and-sign", nil, keydir.Prio3LeaderKey+".pub", keydir.Prio3LeaderSignKey+".pub")
	// variant 3: the leader's operator, handing out the files, puts its
	// own key in place of the helper's (it would then open both shares);
	// the app pins the helper's key to the fingerprint the helper's
	// operator published, as docs/pdd.md asks
	helperPub, err := os.ReadFile(filepath.Join(p.public, keydir.Prio3HelperKey+".pub"))
	must(t, err)
	pin := []string{"--fingerprint", fmt.Sprintf("%s=%x", keydir.Prio3HelperKey+".pub", sha256.Sum256(helperPub))}
	copyFile(t, filepath.Join(attacker, keydir.Prio3LeaderKey+".pub"), filepath.Join(attacker, keydir.Prio3HelperKey+".pub"))
	up3, n3, ref3 := variant("helper", pin, keydir.Prio3HelperKey+".pub")
	leaderKP, err := keydir.LoadKeyPairs([]string{filepath.Join(p.roleDir[keydir.RolePrio3Leader], keydir.Prio3LeaderKey)})
	must(t, err)
	opened, helperOpened, stored := openUploads(t, ctx, p.kafka, up1+up2+up3, kp, leaderKP)
	fmt.Printf("ATTACK prio3-key-substitution: leader report key substituted: %d of %d devices uploaded; report and signing key substituted: %d of %d uploaded; helper key substituted (fingerprint pinned): %d of %d uploaded; of %d uploads in prio3-uploads, %d opened with the attacker's key, %d helper shares opened by the leader holding the attacker's key\n",
		up1, n1, up2, n2, up3, n3, stored, opened, helperOpened)
	if up1+up2+up3 != 0 || opened+helperOpened != 0 {
		t.Fatalf("substituted keys: %d + %d + %d devices uploaded, %d uploads and %d helper shares opened by the attacker", up1, up2, up3, opened, helperOpened)
	}
	if len(ref3) == 0 || !strings.Contains(ref3[0], "fingerprint") {
		t.Fatalf("helper key substitution not refused by its fingerprint: %q", ref3)
	}
	for _, r := range [][]string{ref1, ref2} {
		if len(r) == 0 || !strings.Contains(r[0], "leader") {
			t.Fatalf("refusal does not name the leader's key or settings: %q", r)
		}
	}
	t.Logf("variant 1 refusal: %s", ref1[0])
	t.Logf("variant 2 refusal: %s", ref2[0])
}

// openUploads waits (bounded) until topic prio3-uploads holds want
// messages and returns how many of all it holds open with the attacker's
// keys, how many helper shares open with them once the real leader
// (leader) opened the upload, and how many it holds.
func openUploads(t *testing.T, ctx context.Context, brokers string, want int, keys, leader []*onion.KeyPair) (opened, helperOpened, stored int) {
	t.Helper()
	conn, err := kafkago.DialLeader(ctx, "tcp", brokers, protocol.Prio3UploadsTopic, 0)
	must(t, err)
	defer conn.Close()
	deadline := time.Now().Add(time.Minute)
	var last int64
	for {
		if last, err = conn.ReadLastOffset(); err != nil {
			t.Fatal(err)
		}
		if last >= int64(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if last == 0 {
		return 0, 0, 0
	}
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{brokers}, Topic: protocol.Prio3UploadsTopic, Partition: 0, MaxBytes: 8 << 20})
	defer r.Close()
	for stored < int(last) {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		m, err := r.ReadMessage(rctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				break
			}
			t.Fatal(err)
		}
		stored++
		if _, err := p3.OpenReport(keys, m.Value); err == nil {
			opened++
		}
		if r, err := p3.OpenReport(leader, m.Value); err == nil {
			if _, err := p3.OpenHelperShare(keys[0], r.Campaign, r.Day, r.ID, r.PublicShare, r.SealedHelper); err == nil {
				helperOpened++
			}
		}
	}
	return opened, helperOpened, stored
}
