package keydir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// secretMount lays out files as the kubelet mounts a Secret volume with
// items (its atomic writer): the data in a timestamped directory, a
// "..data" link to it, and each item a link "NAME -> ..data/NAME".
func secretMount(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	ts := filepath.Join(dir, "..2026_11_28_06_00_00.000000001")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(ts, name), b, 0o440); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCustodyInSecretMount: in a Secret mount with the custody marker as
// an item (the Helm chart's keys volume), the loaders read the marker
// through the kubelet's links and refuse another operator's key that was
// mounted by mistake; without the marker item (the chart before) the same
// mount loads it.
func TestCustodyInSecretMount(t *testing.T) {
	src := t.TempDir()
	if err := GenerateRole(src, RoleAggregator); err != nil {
		t.Fatal(err)
	}
	op := t.TempDir()
	if err := GenerateRole(op, RoleOperator); err != nil {
		t.Fatal(err)
	}
	read := func(dir, name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	files := map[string][]byte{
		AggregatorKey:  read(src, AggregatorKey),
		ControlSignKey: read(op, ControlSignKey), // another operator's key, mounted by mistake
		CustodyFile:    read(src, CustodyFile),
	}
	dir := secretMount(t, files)
	if role, err := DirRole(dir); err != nil || role != RoleAggregator {
		t.Fatalf("DirRole of the Secret mount: %q, %v; want %s", role, err, RoleAggregator)
	}
	if err := CheckPrivate(filepath.Join(dir, AggregatorKey)); err != nil {
		t.Errorf("own key: %v", err)
	}
	if err := CheckPrivate(filepath.Join(dir, ControlSignKey)); !errors.Is(err, ErrNotCustodian) {
		t.Errorf("the operator's control key in the aggregator's Secret mount: %v, want ErrNotCustodian", err)
	}
	// control: the same mount without the marker item loads anything
	delete(files, CustodyFile)
	bare := secretMount(t, files)
	if err := CheckPrivate(filepath.Join(bare, ControlSignKey)); err != nil {
		t.Errorf("control: without the marker the check should not apply, got %v", err)
	}
}
