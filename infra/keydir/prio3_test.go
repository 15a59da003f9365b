package keydir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPrio3Custody: the leader's directory refuses the helper's and the
// collector's private keys and the helper's refuses the leader's (a copy
// placed there is not loaded), while each loads its own; the leader and
// the helper import the collector's public key.
func TestPrio3Custody(t *testing.T) {
	dirs := operators(t)
	lead, help := dirs[RolePrio3Leader], dirs[RolePrio3Helper]
	if _, err := LoadKeyPairs([]string{filepath.Join(lead, Prio3LeaderKey)}); err != nil {
		t.Fatalf("leader loads its own key: %v", err)
	}
	if _, err := LoadKeyPairs([]string{filepath.Join(help, Prio3HelperKey)}); err != nil {
		t.Fatalf("helper loads its own key: %v", err)
	}
	for _, d := range []string{lead, help} {
		if _, err := os.Stat(filepath.Join(d, Prio3CollectorKey+".pub")); err != nil {
			t.Errorf("%s lacks the collector's public key: %v", filepath.Base(d), err)
		}
	}
	copyFile(t, filepath.Join(help, Prio3HelperKey), filepath.Join(lead, Prio3HelperKey))
	copyFile(t, filepath.Join(lead, Prio3LeaderKey), filepath.Join(help, Prio3LeaderKey))
	copyFile(t, filepath.Join(dirs[RolePrio3Collector], Prio3CollectorKey), filepath.Join(lead, Prio3CollectorKey))
	for _, c := range []struct{ dir, file, holder string }{
		{lead, Prio3HelperKey, "prio3-helper's private key"},
		{help, Prio3LeaderKey, "prio3-leader's private key"},
		{lead, Prio3CollectorKey, "prio3-collector's private key"},
	} {
		_, err := LoadKeyPairs([]string{filepath.Join(c.dir, c.file)})
		if !errors.Is(err, ErrNotCustodian) || !strings.Contains(err.Error(), c.holder) {
			t.Errorf("%s loads %s: %v, want ErrNotCustodian naming %q", filepath.Base(c.dir), c.file, err, c.holder)
		}
	}
	// a role directory is not made over another Prio3 role's key
	if err := GenerateRole(lead, RolePrio3Helper); err == nil {
		t.Error("the leader's directory was turned into the helper's")
	}
}

// TestVerifyKeys: AddVerifyKeyEpoch writes epoch 1, then 2 with another
// key, keeping 1; the file parses back; every malformed variant of a good
// line is refused, naming its line, without echoing the key.
func TestVerifyKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prio3.verify")
	for want := uint32(1); want <= 2; want++ {
		e, err := AddVerifyKeyEpoch(path)
		if err != nil || e != want {
			t.Fatalf("add epoch: %d, %v; want %d", e, err, want)
		}
	}
	keys, err := LoadVerifyKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[1] == keys[2] || keys[1] == [VerifyKeySize]byte{} {
		t.Fatalf("keys: %d epochs, epoch 1 == 2: %v", len(keys), keys[1] == keys[2])
	}
	if e, _ := keys.Newest(); e != 2 {
		t.Errorf("newest %d, want 2", e)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %o, want 0600", st.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	if string(MarshalVerifyKeys(keys)) != string(b) {
		t.Error("MarshalVerifyKeys does not reproduce the file")
	}
	good := "7 " + strings.Repeat("ab", 32)
	if k, err := ParseVerifyKeys([]byte(good + "\n")); err != nil || len(k) != 1 || k[7][0] != 0xab {
		t.Fatalf("good line: %v, %v", k, err)
	}
	bad := map[string]string{
		"empty":             "",
		"no newline":        good,
		"blank line":        good + "\n\n",
		"comment":           "# keys\n" + good + "\n",
		"crlf":              good + "\r\n",
		"two spaces":        "7  " + strings.Repeat("ab", 32) + "\n",
		"tab":               "7\t" + strings.Repeat("ab", 32) + "\n",
		"trailing space":    good + " \n",
		"upper hex":         "7 " + strings.Repeat("AB", 32) + "\n",
		"short key":         "7 " + strings.Repeat("ab", 31) + "\n",
		"long key":          "7 " + strings.Repeat("ab", 33) + "\n",
		"non-hex":           "7 " + strings.Repeat("zz", 32) + "\n",
		"epoch 0":           "0 " + strings.Repeat("ab", 32) + "\n",
		"leading zero":      "07 " + strings.Repeat("ab", 32) + "\n",
		"sign":              "+7 " + strings.Repeat("ab", 32) + "\n",
		"epoch overflow":    "4294967296 " + strings.Repeat("ab", 32) + "\n",
		"no epoch":          " " + strings.Repeat("ab", 32) + "\n",
		"zero key":          "7 " + strings.Repeat("00", 32) + "\n",
		"decreasing epochs": "8 " + strings.Repeat("ab", 32) + "\n" + good + "\n",
		"repeated epoch":    good + "\n" + good + "\n",
	}
	for name, s := range bad {
		_, err := ParseVerifyKeys([]byte(s))
		if !errors.Is(err, ErrVerifyKeyFile) {
			t.Errorf("%s: %v, want ErrVerifyKeyFile", name, err)
		} else if strings.Contains(err.Error(), "abab") {
			t.Errorf("%s: the error echoes the key: %v", name, err)
		}
	}
	// a file that does not parse is left alone
	junk := filepath.Join(t.TempDir(), "junk")
	os.WriteFile(junk, []byte("junk\n"), 0o600)
	if _, err := AddVerifyKeyEpoch(junk); err == nil {
		t.Error("AddVerifyKeyEpoch rewrote a malformed file")
	}
	if b, _ := os.ReadFile(junk); string(b) != "junk\n" {
		t.Errorf("malformed file changed: %q", b)
	}
}
